"""SageMaker's JSONPath subset for InputFilter and OutputFilter: `$`, `.name`, `['name']`, `*`,
`[*]`, `['a','b']` (an object of those keys), `[i,j]` (negative from the end), `[start:end]`. A
single name or index gives the value; a union, slice or wildcard an array (an object, for names),
later steps applying to each. What is missing is left out (null for a single name), never an
error: a record that does not match still gets an answer."""

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.deploy.base.errors import UsageError


class JsonPathError(UsageError):
    """An expression outside the supported subset."""


@dataclass(frozen=True)
class Names:
    names: tuple[str, ...]
    single: bool


@dataclass(frozen=True)
class Indices:
    picks: tuple[int | slice, ...]
    single: bool


@dataclass(frozen=True)
class Wildcard:
    pass


Step = Names | Indices | Wildcard
JsonPath = Callable[[Any], Any]

_NAME = re.compile(r"\.([A-Za-z_][\w-]*)")
_BRACKET = re.compile(r"\[([^\]]*)\]")
_QUOTED = re.compile(r"""\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*""")
_SLICE = re.compile(r"\s*(-?\d+)?\s*:\s*(-?\d+)?\s*")


def _bracket(inside: str, expression: str) -> Step:
    if inside.strip() == "*":
        return Wildcard()
    parts = inside.split(",")
    quoted = [_QUOTED.fullmatch(part) for part in parts]
    if all(quoted):
        names = tuple(m.group(1) if m.group(1) is not None else m.group(2) for m in quoted if m)
        return Names(names, single=len(names) == 1)
    picks: list[int | slice] = []
    for part in parts:
        if part.strip().lstrip("-").isdigit():
            picks.append(int(part))
        elif match := _SLICE.fullmatch(part):
            start, end = (int(g) if g is not None else None for g in match.groups())
            picks.append(slice(start, end))
        else:
            raise JsonPathError(f"unsupported JSONPath {expression!r}: [{inside}]")
    return Indices(tuple(picks), single=len(picks) == 1 and isinstance(picks[0], int))


def compiled(expression: str) -> JsonPath:
    """What `expression` selects of a value; JsonPathError outside SageMaker's subset."""
    text = expression.strip()
    if not text.startswith("$"):
        raise JsonPathError(f"a JSONPath starts with '$', got {expression!r}")
    steps: list[Step] = []
    position = 1
    while position < len(text):
        rest = text[position:]
        if rest.startswith(".*"):
            steps.append(Wildcard())
            position += 2
        elif match := _NAME.match(rest):
            steps.append(Names((match.group(1),), single=True))
            position += match.end()
        elif match := _BRACKET.match(rest):
            steps.append(_bracket(match.group(1), expression))
            position += match.end()
        else:
            raise JsonPathError(f"unsupported JSONPath {expression!r} at {rest!r}")
    return functools.partial(_apply, steps=tuple(steps))


def _apply(value: Any, steps: tuple[Step, ...]) -> Any:
    if not steps:
        return value
    step, rest = steps[0], steps[1:]
    if isinstance(step, Wildcard):
        items = list(value.values()) if isinstance(value, dict) else value
        return [_apply(item, rest) for item in items] if isinstance(items, list) else None
    if isinstance(step, Names):
        if not isinstance(value, dict):
            return None
        if step.single:
            return _apply(value.get(step.names[0]), rest)
        return {name: _apply(value[name], rest) for name in step.names if name in value}
    if not isinstance(value, list):
        return None
    chosen: list[Any] = []
    for pick in step.picks:
        if isinstance(pick, slice):
            chosen.extend(value[pick])
        elif -len(value) <= pick < len(value):
            chosen.append(value[pick])
    if step.single:
        return _apply(chosen[0], rest) if chosen else None
    return [_apply(item, rest) for item in chosen]


def dumps(value: Any) -> bytes:
    """One compact JSON line."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
