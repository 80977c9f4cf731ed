"""JSON checks for the values that cross the host boundary: the script's result, agent prompts
and schemas, and tool arguments. A failed check names the offending path, such as
`result["items"][2]["score"] is NaN`, so whoever wrote the script can fix it.
"""

import inspect
import json
import math
from json.decoder import scanstring
from json.encoder import encode_basestring
from typing import Any, NamedTuple, Optional

# Deeper values are refused instead of risking the guest's stack in `json.dumps`.
MAX_DEPTH = 200


class NotJson(ValueError):
    """A value that is not JSON; the message is a whole sentence naming the path."""


class _Step(NamedTuple):
    value: Any
    parent: Optional["_Step"]
    segment: str  # how this value is reached from its parent: `["key"]` or `[3]`
    depth: int


def to_json(value: Any, root: str) -> str:
    """Serializes `value` as JSON text, or raises `NotJson` naming the path under `root`."""
    if isinstance(value, str):
        # What json.dumps(value, ensure_ascii=False) does for a str, without building an encoder.
        return encode_basestring(value)
    check_json(value, root)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
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
    stack = [_Step(value, None, "", 0)]
    while stack:
        step = stack.pop()
        current = step.value
        if current is None or isinstance(current, (str, bool, int)):
            continue
        if isinstance(current, float):
            if not math.isfinite(current):
                raise NotJson(f"{_path(root, step)} is {_float_name(current)}")
            continue
        if step.depth >= MAX_DEPTH:
            raise NotJson(_too_deep(root, step))
        if isinstance(current, dict):
            children = []
            for key, item in current.items():
                if not isinstance(key, str):
                    raise NotJson(
                        f"{_path(root, step)} has the key {key!r} ({type(key).__name__}); "
                        "JSON object keys must be strings"
                    )
                segment = "[" + json.dumps(key, ensure_ascii=False) + "]"
                children.append(_Step(item, step, segment, step.depth + 1))
        elif isinstance(current, (list, tuple)):
            children = [
                _Step(item, step, f"[{index}]", step.depth + 1)
                for index, item in enumerate(current)
            ]
        else:
            raise NotJson(f"{_path(root, step)} is {_describe(current)}")
        stack.extend(reversed(children))


def _path(root: str, step: _Step) -> str:
    segments = []
    while step is not None:
        segments.append(step.segment)
        step = step.parent
    return root + "".join(reversed(segments))


def _too_deep(root: str, step: _Step) -> str:
    """Explains a depth overflow, which is usually a value that contains itself."""
    chain = []
    while step is not None:
        chain.append(step)
        step = step.parent
    chain.reverse()
    first_seen = {}
    for link in chain:
        earlier = first_seen.setdefault(id(link.value), link)
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
