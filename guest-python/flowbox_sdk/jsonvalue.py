"""JSON for the values that cross the host boundary: the script's result, agent prompts and
schemas, tool arguments, and the replies coming back. A failed check names the offending path,
such as `result["items"][2]["score"] is NaN`, so whoever wrote the script can fix it.

The text is written and read by the `_json` accelerator's own objects, made here, when the SDK
is imported: they hold their separators and settings themselves and read nothing a script can
reach. `json.dumps` would not do: it reads `JSONEncoder`'s class attributes (`item_separator`,
`encode`, ...) on every call, and a script may set them (`json.JSONEncoder.item_separator =
" | "`) for its own use of `json`, which must not change what the SDK sends.
"""

import inspect
import json.decoder
import math
from _json import encode_basestring, make_encoder, make_scanner, scanstring
from typing import Any

# Deeper values are refused instead of risking the guest's stack in the encoder.
MAX_DEPTH = 200


class NotJson(ValueError):
    """A value that is not JSON; the message is a whole sentence naming the path."""


def _unwritable(value: Any):
    """The encoder's fallback for a value it cannot write: `check_json` refuses those first, so
    only a value that changed between the check and the writing (a container whose iteration
    gives something else the second time) reaches it."""
    raise TypeError(f"a value of type {type(value).__name__} appeared while it was written")


# json.dumps(value, ensure_ascii=False, allow_nan=False) without its circular-reference markers
# (`check_json` bounds the depth): the same text, with separators fixed here.
_ENCODE = make_encoder(None, _unwritable, encode_basestring, None, ": ", ", ", False, False, False)
# json.loads's scanner, made from a decoder with the default settings; it copies them.
_SCAN = make_scanner(json.decoder.JSONDecoder())
_SKIP_WHITESPACE = json.decoder.WHITESPACE.match
_DecodeError = json.decoder.JSONDecodeError


# The values `check_json` has nothing to check in (None too): the encoder writes them as they are.
_SCALARS = frozenset({bool, int})

# One value reached by the walk: (value, parent step or None, key, depth), where the key is how
# the value is reached from its parent (a dict key or a list index). A plain tuple: a
# NamedTuple's Python-level __new__ would cost more than the rest of the step.
_Step = tuple


def to_json(value: Any, root: str) -> str:
    """Serializes `value` as JSON text, or raises `NotJson` naming the path under `root`."""
    if isinstance(value, str):
        return encode_basestring(value)  # what the encoder does for a str, with nothing to check
    if value is not None and type(value) not in _SCALARS:
        check_json(value, root)
    try:
        return "".join(_ENCODE(value, 0))
    except (ValueError, TypeError) as error:  # e.g. an int too long to write as digits
        raise NotJson(f"{root} cannot be written as JSON: {error}") from None


def from_json(text: str) -> Any:
    """`json.loads(text)`, for text the host sent (or `ValueError`). A JSON string (a text
    reply) is decoded by the string scanner alone."""
    if text.startswith('"'):
        value, end = scanstring(text, 1)
        if end == len(text):
            return value
    start = _SKIP_WHITESPACE(text, 0).end()
    try:
        value, end = _SCAN(text, start)
    except StopIteration as stop:
        raise _DecodeError("Expecting value", text, stop.value) from None
    end = _SKIP_WHITESPACE(text, end).end()
    if end != len(text):
        raise _DecodeError("Extra data", text, end)
    return value


def check_json(value: Any, root: str) -> None:
    """Walks `value` iteratively (no recursion limit involved) and raises `NotJson` on the first
    value, in document order, that JSON cannot represent."""
    stack = [(value, None, None, 0)]
    while stack:
        step = stack.pop()
        current, _, _, depth = step
        if current is None or isinstance(current, (str, int)):  # only ever the root
            continue
        if isinstance(current, float):
            if not math.isfinite(current):
                raise NotJson(f"{_path(root, step)} is {_float_name(current)}")
            continue
        if depth >= MAX_DEPTH:
            raise NotJson(_too_deep(root, step))
        depth += 1
        # Children that are None, a str, a bool or an int are JSON as they are: no step for them.
        if isinstance(current, dict):
            children = []
            for key, item in current.items():
                if not isinstance(key, str):
                    raise NotJson(
                        f"{_path(root, step)} has the key {key!r} ({type(key).__name__}); "
                        "JSON object keys must be strings"
                    )
                if not (item is None or isinstance(item, (str, int))):
                    children.append((item, step, key, depth))
        elif isinstance(current, (list, tuple)):
            children = [
                (item, step, index, depth)
                for index, item in enumerate(current)
                if not (item is None or isinstance(item, (str, int)))
            ]
        else:
            raise NotJson(f"{_path(root, step)} is {_describe(current)}")
        stack.extend(reversed(children))


def _path(root: str, step: _Step) -> str:
    segments = []
    _, parent, key, _ = step
    while parent is not None:
        segments.append(f"[{key}]" if isinstance(key, int) else f"[{encode_basestring(key)}]")
        _, parent, key, _ = parent
    return root + "".join(reversed(segments))


def _too_deep(root: str, step: _Step) -> str:
    """Explains a depth overflow, which is usually a value that contains itself."""
    chain = []
    while step is not None:
        chain.append(step)
        step = step[1]  # its parent
    chain.reverse()
    first_seen = {}
    for link in chain:
        earlier = first_seen.setdefault(id(link[0]), link)  # by the identity of its value
        if earlier is not link:
            return (
                f"{_path(root, link)} refers back to {_path(root, earlier)} (a circular reference)"
            )
    return f"{root} is nested more than {MAX_DEPTH} levels deep"


def _float_name(number: float) -> str:
    if math.isnan(number):
        return "NaN"
    return "infinity" if number > 0 else "-infinity"


def _describe(value: Any) -> str:
    """Says what a non-JSON value is, with the usual fix."""
    if isinstance(value, (set, frozenset)):
        return "a set; use a list"
    if isinstance(value, (bytes, bytearray)):
        return "bytes; decode them to a str"
    if inspect.isawaitable(value):
        return f"an awaitable that was never awaited ({type(value).__name__}); add await"
    if callable(value):
        return f"a callable ({getattr(value, '__name__', type(value).__name__)}); call it"
    return f"a value of type {type(value).__name__}; use a str, number, bool, None, list or dict"
