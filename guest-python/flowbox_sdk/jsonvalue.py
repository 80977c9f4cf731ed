"""JSON checks for the values that cross the host boundary: the script's result, agent prompts
and schemas, and tool arguments. A failed check names the offending path, such as
`result["items"][2]["score"] is NaN`, so whoever wrote the script can fix it.
"""

import inspect
import json
import math
from json.decoder import scanstring
from json.encoder import encode_basestring
from typing import Any

# Deeper values are refused instead of risking the guest's stack in `json.dumps`.
MAX_DEPTH = 200


class NotJson(ValueError):
    """A value that is not JSON; the message is a whole sentence naming the path."""


# What json.dumps(value, ensure_ascii=False, allow_nan=False) builds for every call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


# One value reached by the walk: (value, parent step or None, key, depth), where the key is how
# the value is reached from its parent (a dict key or a list index). A plain tuple: a
# NamedTuple's Python-level __new__ would cost more than the rest of the step.
_Step = tuple


def to_json(value: Any, root: str) -> str:
    """Serializes `value` as JSON text, or raises `NotJson` naming the path under `root`."""
    if isinstance(value, str):
        return encode_basestring(value)  # what the encoder does for a str, with nothing to check
    check_json(value, root)
    try:
        return _ENCODER.encode(value)
    except ValueError as error:  # e.g. an int too long to write as digits
        raise NotJson(f"{root} cannot be written as JSON: {error}") from None


def from_json(text: str) -> Any:
    """`json.loads(text)`; a JSON string (a text reply) is decoded by the string scanner
    json.loads would reach, without the decoder around it."""
    if text.startswith('"'):
        value, end = scanstring(text, 1)
        if end == len(text):
            return value
    return json.loads(text)


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
