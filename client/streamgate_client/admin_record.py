"""The base of ``Admin``'s typed results: the gateway's JSON document, read-only, with a typed
attribute per field of its schema (client/streamgate_client/admin_types.py declares them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Generic, NoReturn, TypeVar, cast, overload

import orjson

T = TypeVar("T")
Convert = Callable[[Any], Any]


class Field(Generic[T]):
    """A typed attribute reading one key of a ``Record``; ``convert`` (a ``Record`` class,
    ``each(...)`` or ``values(...)``) types what is nested when the record is built. A field not
    ``required`` reads None when the gateway left it out."""

    __slots__ = ("convert", "key", "required")

    def __init__(self, convert: Convert | None = None, *, required: bool = True,
                 key: str = "") -> None:
        self.convert, self.required, self.key = convert, required, key

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = self.key or name

    @overload
    def __get__(self, record: None, owner: type) -> Field[T]: ...
    @overload
    def __get__(self, record: Record, owner: type) -> T: ...
    def __get__(self, record: Record | None, owner: type) -> Field[T] | T:
        if record is None:
            return self
        return cast(T, record[self.key] if self.required else record.get(self.key))


def each(convert: Convert) -> Convert:
    """An array's items, each converted."""
    return lambda items: [convert(item) for item in items]


def values(convert: Convert) -> Convert:
    """A map's values, each converted (a null value stays None)."""
    return lambda mapping: {key: None if value is None else convert(value)
                            for key, value in mapping.items()}


class Record(dict[str, Any]):
    """A document as the gateway sent it (every field, extra ones a newer gateway adds too, in its
    order: what ``orjson.dumps`` writes), read-only; nested objects are records too.
    ``to_dict()`` is a plain, mutable copy."""

    __slots__ = ()
    _nested: ClassVar[Mapping[str, Convert]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = (value for klass in reversed(cls.__mro__) for value in vars(klass).values()
                  if isinstance(value, Field))
        cls._nested = {field.key: field.convert for field in fields if field.convert}

    def __init__(self, document: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        super().__init__(document)
        for key, convert in self._nested.items():
            value = dict.get(self, key)
            if value is not None:
                dict.__setitem__(self, key, convert(value))

    def to_dict(self) -> dict[str, Any]:
        """The document as plain JSON types (dicts and lists), a copy."""
        document: dict[str, Any] = orjson.loads(orjson.dumps(self))
        return document

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"

    def __reduce__(self) -> tuple[type[Record], tuple[dict[str, Any]]]:
        return type(self), (dict(self),)

    def _refuse(self) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is read-only (to_dict() is a mutable copy)")

    def __setitem__(self, key: str, value: Any) -> NoReturn:
        self._refuse()

    def __delitem__(self, key: str) -> NoReturn:
        self._refuse()

    # it never returns, so it cannot return what ``|`` does: mypy holds the two must agree
    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        self._refuse()

    def clear(self) -> NoReturn:
        self._refuse()

    def pop(self, *args: Any) -> NoReturn:
        self._refuse()

    def popitem(self) -> NoReturn:
        self._refuse()

    def setdefault(self, *args: Any) -> NoReturn:
        self._refuse()

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()
