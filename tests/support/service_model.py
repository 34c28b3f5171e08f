"""A request's parameters checked against botocore's own service model, as AWS checks them
before it acts: required members, members the shape does not have, types, enums, string
lengths and patterns, number ranges, list and map lengths. The first problem is worded as
AWS's ValidationException words a constraint ("1 validation error detected: Value 'x' at
'endpointName' failed to satisfy constraint: Member must ..."), the member's path in
lowerCamelCase, dotted, a list's item as `tags.1.member.key` (1-based).

From AWS's answers (quoted in public issues): the "Member must not be null", "must have length
less than or equal to", "must satisfy enum value set: [A, B]", "must have value greater than or
equal to" and "must satisfy regular expression pattern:" wordings. Ours, not confirmed: the
wording of an unknown member and of a wrong type (AWS's JSON services answer those with a
SerializationException whose text varies), and map entries' paths (`environment.KEY`). A
pattern Python's `re` cannot compile (Java's surrogate pairs, `\\p{...}`) is not checked.
"""

import functools
import re
from collections.abc import Mapping
from typing import Any

import botocore.session
from botocore.model import OperationModel, Shape

NUMBERS = ("integer", "long", "float", "double")


@functools.cache
def operation_model(service: str, operation: str) -> OperationModel:
    model = botocore.session.get_session().get_service_model(service)
    return model.operation_model(operation)


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def member_path(parent: str, name: str) -> str:
    """`name` in AWS's lowerCamelCase under `parent` (dotted)."""
    member = name[:1].lower() + name[1:]
    return f"{parent}.{member}" if parent else member


def shown(value: Any) -> str:
    return "null" if value is None else f"'{value}'"


def violated(value: Any, path: str, constraint: str) -> str:
    return (
        f"Value {shown(value)} at '{path}' failed to satisfy constraint: Member must {constraint}"
    )


def _type_problem(shape: Shape, value: Any, path: str) -> str | None:
    kind = shape.type_name
    expected: tuple[type, ...] = {
        "structure": (dict,),
        "map": (dict,),
        "list": (list,),
        "string": (str,),
        "boolean": (bool,),
        "blob": (str, bytes),
        "timestamp": (int, float, str),
        "integer": (int,),
        "long": (int,),
        "float": (int, float),
        "double": (int, float),
    }[kind]
    if isinstance(value, expected) and not (kind != "boolean" and isinstance(value, bool)):
        return None
    return violated(value, path, f"be of type {kind}")


def _range_problem(shape: Shape, value: Any, path: str) -> str | None:
    """A string's or a list's length, or a number's value, outside the shape's min and max."""
    least, most = shape.metadata.get("min"), shape.metadata.get("max")
    measured, what = (value, "value") if shape.type_name in NUMBERS else (len(value), "length")
    if least is not None and measured < least:
        return violated(value, path, f"have {what} greater than or equal to {least}")
    if most is not None and measured > most:
        return violated(value, path, f"have {what} less than or equal to {most}")
    return None


def _string_problem(shape: Shape, value: str, path: str) -> str | None:
    if shape.enum and value not in shape.enum:
        return violated(value, path, f"satisfy enum value set: [{', '.join(shape.enum)}]")
    pattern = shape.metadata.get("pattern")
    compiled = _compiled(pattern) if pattern else None
    if compiled is not None and not compiled.fullmatch(value):
        return violated(value, path, f"satisfy regular expression pattern: {pattern}")
    return None


def value_problem(shape: Shape, value: Any, path: str) -> str | None:
    """The first problem of `value` against `shape` (None: AWS accepts it)."""
    problem = _type_problem(shape, value, path)
    if problem is None and shape.type_name in (*NUMBERS, "string", "list", "map"):
        problem = _range_problem(shape, value, path)
    if problem is not None:
        return problem
    if shape.type_name == "string":
        return _string_problem(shape, value, path)
    if shape.type_name == "structure":
        return structure_problem(shape, value, path)
    if shape.type_name == "list":
        for index, item in enumerate(value, 1):
            found = value_problem(shape.member, item, f"{path}.{index}.member")
            if found is not None:
                return found
    if shape.type_name == "map":
        for key, item in value.items():
            found = value_problem(shape.key, key, path) or value_problem(
                shape.value, item, f"{path}.{key}"
            )
            if found is not None:
                return found
    return None


def structure_problem(shape: Shape, value: Mapping[str, Any], path: str) -> str | None:
    for name in shape.required_members:
        if value.get(name) is None:
            return violated(None, member_path(path, name), "not be null")
    for name, item in value.items():
        if name not in shape.members:
            return f"Unknown member '{member_path(path, name)}'"
        if item is not None:
            found = value_problem(shape.members[name], item, member_path(path, name))
            if found is not None:
                return found
    return None


def request_problem(service: str, operation: str, params: Mapping[str, Any]) -> str | None:
    """AWS's ValidationException message for `params` of `operation`, or None when the
    service model accepts them."""
    shape = operation_model(service, operation).input_shape
    if shape is None:
        return None if not params else f"1 validation error detected: {operation} takes none"
    problem = structure_problem(shape, params, "")
    return None if problem is None else f"1 validation error detected: {problem}"
