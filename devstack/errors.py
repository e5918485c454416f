"""Errors raised by the dev-stack launchers (local Redis Cluster and etcd processes)."""

from __future__ import annotations

from pathlib import Path


class DevStackError(Exception):
    """Base class for every dev-stack failure."""

    retriable: bool = False


class MissingBinary(DevStackError):
    """A server binary is not on PATH; the message names the Debian package that provides it."""

    def __init__(self, binary: str, package: str) -> None:
        self.binary = binary
        self.package = package
        super().__init__(
            f"'{binary}' was not found on PATH; install it with: apt-get install {package} (or run "
            "`make deps`)"
        )


class StartupTimeoutError(DevStackError):
    """A server did not become ready before its deadline; carries the tail of its log."""

    retriable = True

    def __init__(
        self, what: str, timeout_s: float, reason: str, log_path: Path | None, log_tail: str
    ) -> None:
        self.what = what
        self.timeout_s = timeout_s
        self.reason = reason
        self.log_path = log_path
        self.log_tail = log_tail
        message = f"{what} not ready after {timeout_s:.1f} s: {reason}"
        if log_path is not None:
            message += f"\n--- last lines of {log_path} ---\n{log_tail}"
        super().__init__(message)


class ProcessExitedError(DevStackError):
    """A server process exited while we were waiting for it to become ready."""

    def __init__(self, what: str, returncode: int, log_path: Path | None, log_tail: str) -> None:
        self.what = what
        self.returncode = returncode
        self.log_path = log_path
        self.log_tail = log_tail
        message = f"{what} exited with code {returncode} during startup"
        if log_path is not None:
            message += f"\n--- last lines of {log_path} ---\n{log_tail}"
        super().__init__(message)


class LayoutMismatchError(DevStackError):
    """The data dir holds a cluster with a different shape than the one requested."""
