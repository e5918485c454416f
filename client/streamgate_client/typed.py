"""Typed decoding of message values (``decode_as``): dataclasses through a small built-in mapper,
pydantic models and msgspec Structs through their own validation, each used only if installed."""

from __future__ import annotations

import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from streamgate_client.errors import DecodeFailed

T = TypeVar("T")
Decoder = Callable[[Any], Any]
_NO_DEFAULT = dataclasses.MISSING


class Mismatch(ValueError):
    """A value that does not fit its annotation, with the path to it (``/lines/0/qty``)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"at {path or '/'}: {reason}")


def decoder_for(target: type[T]) -> Callable[[Any], T]:
    """How to build a ``target`` from a parsed JSON value; ``TypeError`` for a type none of the
    decoders knows (checked when the consumer is made, not on its first message)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and issubclass(target, pydantic.BaseModel):
        validate: Callable[[Any], T] = target.model_validate  # type: ignore[attr-defined]
        return validate
    msgspec = sys.modules.get("msgspec")
    if msgspec is not None and issubclass(target, msgspec.Struct):
        return lambda value: typing.cast(T, msgspec.convert(value, target))
    if dataclasses.is_dataclass(target):
        return lambda value: typing.cast(T, _convert(value, target, ""))
    raise TypeError(f"decode_as takes a dataclass, a pydantic model or a msgspec Struct, "
                    f"not {target!r}")


def decoders_for(decode_as: type[Any] | Mapping[str, type[Any]] | None,
                 ) -> Callable[[str], tuple[Decoder, str] | None]:
    """``decode_as`` (one type, or one per topic) as a lookup by topic of its decoder and the
    type's name; the decoders are made at once, so that a wrong type fails early."""
    if decode_as is None:
        return lambda topic: None
    if isinstance(decode_as, Mapping):
        table = {topic: (decoder_for(target), type_name(target))
                 for topic, target in decode_as.items()}
        return table.get
    one = (decoder_for(decode_as), type_name(decode_as))
    return lambda topic: one


def decode_value(decoder: tuple[Decoder, str], where: tuple[str, int, str], value: Any,
                 binary: bool) -> Any:
    """One message's value decoded, or ``DecodeFailed`` naming the message (``where``: topic,
    partition, offset)."""
    decode, target = decoder
    if binary:
        raise DecodeFailed(*where, target, "the value is binary (value_b64), not JSON")
    try:
        return decode(value)
    # the decoder may be a user's pydantic or msgspec type, raising its own errors: each is a
    # value that does not decode, to be named with the message it came from
    except Exception as exc:
        raise DecodeFailed(*where, target, str(exc)) from exc


def type_name(target: object) -> str:
    """A type's name for an error message."""
    return getattr(target, "__qualname__", None) or repr(target)


def _convert(value: Any, annotation: Any, path: str) -> Any:
    """``value`` as ``annotation`` says (recursively), or ``Mismatch``."""
    if annotation is Any or annotation is object:
        return value
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return _union(value, typing.get_args(annotation), path)
    if origin is typing.Literal:
        if value not in typing.get_args(annotation):
            raise Mismatch(path, f"{value!r} is not one of {typing.get_args(annotation)}")
        return value
    if origin is not None:
        return _container(value, origin, typing.get_args(annotation), path)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return _dataclass(value, annotation, path)
    return _scalar(value, annotation, path)


def _union(value: Any, options: tuple[Any, ...], path: str) -> Any:
    if value is not None:
        # an Optional of one type: that type's own error, with its deeper path
        options = tuple(option for option in options if option is not type(None))
        if len(options) == 1:
            return _convert(value, options[0], path)
    reasons = []
    for option in options:
        try:
            return _convert(value, option, path)
        except Mismatch as exc:
            reasons.append(exc.reason)
    raise Mismatch(path, "; ".join(reasons))


def _container(value: Any, origin: Any, arguments: tuple[Any, ...], path: str) -> Any:
    if isinstance(origin, type) and issubclass(origin, Mapping):
        if not isinstance(value, dict):
            raise Mismatch(path, f"expected an object, got {_kind(value)}")
        item = arguments[1] if len(arguments) == 2 else Any
        return {key: _convert(v, item, f"{path}/{key}") for key, v in value.items()}
    if isinstance(origin, type) and issubclass(origin, Sequence | set | frozenset):
        if not isinstance(value, list):
            raise Mismatch(path, f"expected an array, got {_kind(value)}")
        return _sequence(value, origin, arguments, path)
    return value


def _sequence(value: list[Any], origin: type, arguments: tuple[Any, ...], path: str) -> Any:
    if origin is tuple and arguments and arguments[-1] is not Ellipsis:
        if len(value) != len(arguments):
            raise Mismatch(path, f"expected {len(arguments)} items, got {len(value)}")
        return tuple(_convert(v, a, f"{path}/{i}")
                     for i, (v, a) in enumerate(zip(value, arguments, strict=True)))
    item = arguments[0] if arguments else Any
    items = [_convert(v, item, f"{path}/{i}") for i, v in enumerate(value)]
    if origin in (tuple, set, frozenset):
        return origin(items)
    return items


def _dataclass(value: Any, target: type, path: str) -> Any:
    if not isinstance(value, dict):
        raise Mismatch(path, f"expected an object for {target.__qualname__}, got {_kind(value)}")
    hints = typing.get_type_hints(target)
    arguments: dict[str, Any] = {}
    for field in dataclasses.fields(target):
        if not field.init:
            continue
        if field.name in value:
            arguments[field.name] = _convert(value[field.name], hints[field.name],
                                             f"{path}/{field.name}")
        elif field.default is _NO_DEFAULT and field.default_factory is _NO_DEFAULT:
            raise Mismatch(path, f"missing required field {field.name!r}")
    # fields the type does not declare are left out: a newer schema version may add some
    return target(**arguments)


def _scalar(value: Any, annotation: Any, path: str) -> Any:
    if annotation is None or annotation is type(None):
        if value is not None:
            raise Mismatch(path, f"expected null, got {_kind(value)}")
        return None
    if annotation is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        try:
            return annotation(value)
        except ValueError:
            raise Mismatch(path, f"{value!r} is not a {annotation.__qualname__}") from None
    if isinstance(annotation, type) and not _is_instance(value, annotation):
        raise Mismatch(path, f"expected {annotation.__qualname__}, got {_kind(value)}")
    return value


def _is_instance(value: Any, annotation: type) -> bool:
    """``isinstance``, except that a JSON boolean is not an integer."""
    if isinstance(value, bool) and annotation is not bool:
        return False
    return isinstance(value, annotation)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)
