"""What a guarded script can reach of Python itself, as the script contract says: its builtins,
and read-only views of its standard-library modules. A view exposes only a module's public,
non-module attributes, minus known attribute-walk gadgets, so `import statistics` gives no
`statistics.sys`.
"""

import builtins
import importlib
import types

from . import contract

# Public names that walk attributes by string or evaluate strings as code, which would undo the
# guard's attribute rules.
_HIDDEN = {
    "string": {"Formatter"},
    "operator": {"attrgetter", "methodcaller"},
    "typing": {"get_type_hints", "ForwardRef", "evaluate_forward_ref"},
}

_MISSING = object()


def available_modules_hint() -> str:
    """The sentence every rejected import ends with."""
    return (
        f"Available modules: {', '.join(contract.MODULES)}. The primitives "
        f"{', '.join(contract.PRIMITIVE_NAMES)} are already available without imports."
    )


class ModuleView:
    """A read-only window on one allowed module."""

    __slots__ = ("_module", "_hidden")

    def __init__(self, module: types.ModuleType):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_hidden", _HIDDEN.get(module.__name__, set()))

    def __getattr__(self, name: str):
        # Only reached for names that are not the view's own; read the module live so
        # replacements made at import time (the virtual `time.sleep`) show through.
        if not name.startswith("_") and name not in self._hidden:
            value = getattr(self._module, name, _MISSING)
            if value is not _MISSING and not isinstance(value, types.ModuleType):
                return value
        raise AttributeError(f"module '{self._module.__name__}' has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"module '{self._module.__name__}' is read-only in workflow scripts")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"module '{self._module.__name__}' is read-only in workflow scripts")

    def __repr__(self) -> str:
        return f"<module '{self._module.__name__}'>"


# The contract's modules (pure, deterministic, useful in glue code), all imported here, when the
# SDK is imported, which is at component build time: only modules imported then exist in the
# guest.
_VIEWS = {name: ModuleView(importlib.import_module(name)) for name in contract.MODULES}

# Modules the standard library's C code imports on first use while a script's frame is current
# (`datetime.strptime` imports `_strptime`). Such an import calls the script's `__import__` only
# for its side effect and then reads `sys.modules` itself, so they are loaded now and
# `safe_import` lets the call through without handing anything out.
_STDLIB_HELPERS = {name: importlib.import_module(name) for name in ("_strptime",)}


def safe_import(name, globals=None, locals=None, fromlist=(), level=0):
    """The `__import__` of guarded scripts: allowed modules only, and only as views.

    The guard already rejected other imports before the script ran; this keeps the same rule
    for imports it could not see, and gives the same message.
    """
    if level != 0:
        raise ImportError(f"relative imports are not available. {available_modules_hint()}")
    view = _VIEWS.get(name)
    if view is None:
        if name in _STDLIB_HELPERS:
            return None
        raise ImportError(
            f"import of '{name}' is not allowed in workflow scripts. {available_modules_hint()}"
        )
    return view


def _guarded_builtins() -> dict:
    """The contract's available builtins, those the guard lets through only with a literal
    attribute name, and (as the contract says) every exception and warning class."""
    names = (*contract.AVAILABLE_BUILTINS, *contract.LITERAL_ATTRIBUTE_NAME)
    namespace = {name: getattr(builtins, name) for name in names}
    if contract.ALL_EXCEPTION_CLASSES:
        for name, value in vars(builtins).items():
            if isinstance(value, type) and issubclass(value, BaseException):
                namespace[name] = value
    # `class` statements compile to a call of __build_class__.
    namespace["__build_class__"] = builtins.__build_class__
    return namespace


_SAFE_NAMESPACE = _guarded_builtins()


def safe_builtins(print_function) -> dict:
    """The `__builtins__` of a guarded script; `print` writes to the run's log."""
    return {**_SAFE_NAMESPACE, "print": print_function, "__import__": safe_import}


def full_builtins(print_function) -> dict:
    """The `__builtins__` of an unguarded script: everything, with `print` still logging."""
    namespace = dict(vars(builtins))
    namespace["print"] = print_function
    return namespace
