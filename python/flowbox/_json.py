"""JSON that crosses into flowbox and back with the same meaning.

Values go out as JSON text and come back parsed from it: integers of any size stay exact,
floats round-trip to the bit (``-0.0`` included), and objects keep their key order. What JSON
cannot carry is refused with the path to it, never changed on the way: a ``NaN`` or an
infinity, a ``dict`` key that is not a ``str``, a ``set``, a ``bytes``, a lone surrogate in a
``str``. A number written past a float's range (``1e400``), or too small for one (``1e-400``),
reads back as a :class:`decimal.Decimal` holding its exact text.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


class NotJson(TypeError, ValueError):
    """A value that JSON cannot carry unchanged."""


def check(value: Any, path: str = "the value") -> None:
    """Raises :class:`NotJson`, naming the place, where ``value`` holds what JSON cannot carry."""
    if isinstance(value, str):
        _check_text(value, path)
        return
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(f"{path} is {value!r}, which JSON cannot carry")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotJson(f"{path} has the key {key!r}: JSON object keys are str")
            _check_text(key, f"{path} key {key!r}")
            check(item, f"{path}[{key!r}]")
        return
    raise NotJson(f"{path} is a {type(value).__name__}, which is not JSON")


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise NotJson(
            f"{path} holds a lone surrogate ({text[error.start]!r}), which is not text"
        ) from None


def dumps(value: Any, what: str = "the value") -> str:
    """``value`` as compact JSON text; :class:`NotJson` names what is not JSON in it."""
    check(value, what)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _float(text: str) -> float | Decimal:
    number = float(text)
    if not math.isfinite(number) or (number == 0 and Decimal(text) != 0):
        return Decimal(text)  # past a float's range, or too small for one: kept exact
    return number


def loads(text: str) -> Any:
    """JSON text as Python values, every number as written."""
    return json.loads(text, parse_float=_float)
