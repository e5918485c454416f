"""Checks that an ``Admin`` result holds, field by field, what its typed attributes say (the
types client/streamgate_client/admin_types.py has from /openapi.json), nested records included."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from streamgate_client.admin_record import Field, Record


def assert_typed(record: Record) -> None:
    """Every field's value matches its annotation; the record is the class it says."""
    for name, hint in typing.get_type_hints(type(record)).items():
        if typing.get_origin(hint) is Field:
            value = getattr(record, name)
            [annotation] = typing.get_args(hint)
            assert matches(value, annotation), (
                f"{type(record).__name__}.{name} = {value!r} is no {annotation}")


def matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` is of ``annotation`` (the forms the generated module uses)."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return any(matches(value, argument) for argument in arguments)
    if origin is typing.Literal:
        return value in arguments
    if origin is Sequence:
        return isinstance(value, list) and all(matches(item, arguments[0]) for item in value)
    if origin is Mapping:
        return isinstance(value, dict) and all(matches(item, arguments[1])
                                               for item in value.values())
    if annotation is object:
        return True
    if annotation is types.NoneType:
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if not isinstance(value, annotation) or (isinstance(value, bool) and annotation is int):
        return False
    if issubclass(annotation, Record):
        assert_typed(value)
    return True
