"""Errors of the schema registry's gateway side: a schema refused at registration, one
incompatible with the versions before it, or a value that cannot be converted between versions."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.schemas.compat import Change


class SchemaError(Exception):
    """Base of the schema errors; ``message`` is for humans."""

    retriable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SchemaRejected(SchemaError):
    """A schema refused before any compatibility check (hostile, unusable, or unknown mode);
    ``pointer`` is a JSON pointer into the request body."""

    def __init__(self, pointer: str, message: str) -> None:
        super().__init__(message)
        self.pointer = pointer


class SchemaIncompatible(SchemaError):
    """A schema whose ``mode`` refuses it against earlier versions; each change is named."""

    def __init__(self, mode: str, changes: Sequence[Change]) -> None:
        names = ", ".join(sorted({change.change for change in changes}))
        super().__init__(f"the schema is not {mode} compatible: {names}")
        self.mode = mode
        self.changes = tuple(changes)


class ConversionFailed(SchemaError):
    """A value that cannot be converted to the asked version: a migration not declared, a value
    that is not JSON, or a result that does not match the target schema; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
