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
        super().__init__(_with_log_tail(f"{what} not ready after {timeout_s:.1f} s: {reason}",
                                        log_path, log_tail))


class ProcessExitedError(DevStackError):
    """A server process exited while we were waiting for it to become ready."""

    def __init__(self, what: str, returncode: int, log_path: Path | None, log_tail: str) -> None:
        self.what = what
        self.returncode = returncode
        self.log_path = log_path
        self.log_tail = log_tail
        super().__init__(_with_log_tail(f"{what} exited with code {returncode} during startup",
                                        log_path, log_tail))


def _with_log_tail(message: str, log_path: Path | None, log_tail: str) -> str:
    """``message`` followed by the last lines of the server's log, when there is one."""
    if log_path is None:
        return message
    return f"{message}\n--- last lines of {log_path} ---\n{log_tail}"


class LayoutMismatchError(DevStackError):
    """The data dir holds a cluster with a different shape than the one requested."""
