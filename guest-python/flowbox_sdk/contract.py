"""The script contract, read from the one file that holds it (`script.json`, in the flowbox
crate's `contract/` folder): the modules a script may import, the primitives, and the builtins
it gets or is refused with a reason. The guard, the guarded builtins and the preloaded modules
are all built from it; so are the root agent's guidance and the README's tests.

The file is found on the module path: `build.sh` mounts its folder there for componentize-py,
whose build-time interpreter reads it once (the parsed contract is part of the snapshot, so
nothing is read at run time), and `pytest.ini` adds it for the native tests.
"""

import json
import os
import sys

FILE_NAME = "script.json"


def _find() -> str:
    for directory in sys.path:
        path = os.path.join(directory or os.curdir, FILE_NAME)
        if os.path.isfile(path):
            return path
    raise ImportError(
        f"the script contract ({FILE_NAME}) is not on the module path; add the flowbox "
        "crate's contract/ folder to it, as build.sh and pytest.ini do"
    )


def _load(path: str) -> dict:
    with open(path, encoding="utf-8") as file:
        contract = json.load(file)
    builtins = contract["builtins"]
    names = [
        *builtins["available"],
        *builtins["literal_attribute_name"],
        *builtins["refused"],
    ]
    if len(names) != len(set(names)):
        raise ValueError(f"{path}: a builtin is classified twice")
    if not isinstance(builtins["all_exception_classes"], bool):
        raise ValueError(f"{path}: builtins.all_exception_classes must be true or false")
    return contract


PATH = _find()
CONTRACT = _load(PATH)

# Module names a script may import, in the contract's order.
MODULES = tuple(CONTRACT["modules"])
# The primitives' names, in the contract's order.
PRIMITIVE_NAMES = tuple(primitive["name"] for primitive in CONTRACT["primitives"])
# Builtins a guarded script gets as they are (`print` is replaced by the run's logging one).
AVAILABLE_BUILTINS = tuple(CONTRACT["builtins"]["available"])
# Whether every exception and warning class among the builtins is available too.
ALL_EXCEPTION_CLASSES = CONTRACT["builtins"]["all_exception_classes"]
# Builtins available only when called with the attribute name as a string literal, each with
# what to do instead when the name is not one.
LITERAL_ATTRIBUTE_NAME = dict(CONTRACT["builtins"]["literal_attribute_name"])
# Builtins the guard refuses, each with the reason a refused script is told.
REFUSED_BUILTINS = dict(CONTRACT["builtins"]["refused"])
