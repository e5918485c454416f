"""The archive's store: named files on a local path or an S3-compatible object store through
pyarrow.fs, its blocking calls off the event loop, every failure as ArchiveUnavailable."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from storage.archive.names import is_segment_file, partition_dir
from storage.archive.row_groups import RowGroupCache
from storage.errors import ArchiveUnavailable

T = TypeVar("T")
# decoded row groups a store keeps for paged reads (a row group is a few MiB decoded)
CACHE_BYTES = 64 << 20
# What pyarrow raises for a failed call: I/O errors (ArrowIOError and FileNotFoundError are
# OSErrors, as are the AWS SDK's) and Arrow's own (a truncated or corrupt file).
_FAILURES = (OSError, pa.ArrowException)


@dataclass(frozen=True, slots=True)
class S3Settings:
    """How to reach an S3-compatible store; ``endpoint_override`` (``host:port``) for anything but
    AWS itself. Without keys the store is read anonymously, unless ``credentials_chain`` lets the
    AWS SDK find credentials itself (its environment variables, files, an instance role)."""

    endpoint_override: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    scheme: str = "https"
    credentials_chain: bool = False
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_attempts: int = 3

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow S3 filesystem with these settings."""
        keys = self.access_key is not None or self.secret_key is not None
        return pafs.S3FileSystem(
            access_key=self.access_key, secret_key=self.secret_key,
            anonymous=not keys and not self.credentials_chain, region=self.region,
            scheme=self.scheme, endpoint_override=self.endpoint_override,
            connect_timeout=self.connect_timeout_s, request_timeout=self.request_timeout_s,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=self.max_attempts))


def archive_location(url: str, s3: S3Settings | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the root folder of the archive at ``url``: ``file:///absolute/path`` or
    ``s3://bucket/prefix`` (reached with ``s3``). Nothing is contacted yet. ValueError for any
    other URL."""
    parts = urlsplit(url)
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return pafs.LocalFileSystem(), unquote(parts.path).rstrip("/") or "/"
    if parts.scheme == "s3" and parts.netloc:
        return ((s3 or S3Settings()).filesystem(),
                f"{parts.netloc}{unquote(parts.path)}".rstrip("/"))
    raise ValueError(f"an archive URL is file:///absolute/path or s3://bucket/prefix: {url!r}")


def open_archive(url: str, s3: S3Settings | None = None, io_threads: int = 4) -> ArchiveStore:
    """The store at ``url`` (``archive_location``); ``check`` contacts it."""
    filesystem, root = archive_location(url, s3)
    return ArchiveStore(url, filesystem, root, io_threads)


class ArchiveStore:
    """Files named relative to the store's root (``topic/partition/segment.parquet``), written
    whole or not at all. An async context manager; ``aclose`` is idempotent."""

    def __init__(self, url: str, filesystem: pafs.FileSystem, root: str, io_threads: int,
                 cache_bytes: int = CACHE_BYTES) -> None:
        self.url = url
        self._fs = filesystem
        self._root = root
        self._local = isinstance(filesystem, pafs.LocalFileSystem)
        self._executor = ThreadPoolExecutor(io_threads, thread_name_prefix="archive-io")
        self.row_groups = RowGroupCache(cache_bytes)  # decoded row groups, for paged reads
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Refuse new calls and wait for the running ones to end; idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)

    async def run(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the store's I/O threads; an I/O or Arrow error becomes
        ArchiveUnavailable (``what`` says what failed)."""
        if self._closed:
            raise ArchiveUnavailable(f"archive {self.url}: closed, cannot {what}")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except _FAILURES as exc:
            raise ArchiveUnavailable(f"archive {self.url}: cannot {what}: {exc}") from exc

    async def check(self) -> None:
        """Raise ArchiveUnavailable unless the store answers and its root (a local folder, made if
        missing) or bucket exists."""
        await self.run("reach its root", self._check)

    async def put(self, name: str, data: bytes | pa.Buffer) -> None:
        """Write ``data`` as ``name``, replacing any file of that name. A reader sees the whole new
        file or none: a temporary file, synced, then renamed on a local path; one upload, which
        appears when it completes, on an object store."""
        await self.run(f"write {name}", self._put, name, data)

    async def read(self, name: str, fn: Callable[[pa.NativeFile], T]) -> T:
        """``fn`` run on ``name`` opened for random access (on the store's I/O threads)."""
        return await self.run(f"read {name}", self._read, name, fn)

    async def size(self, name: str) -> int:
        """The size of ``name`` in bytes; ArchiveUnavailable when it does not exist."""
        return await self.run(f"stat {name}", self._size, name)

    async def delete(self, name: str) -> None:
        """Delete ``name``; a missing file is not an error."""
        await self.run(f"delete {name}", self._delete, name)

    async def list_segments(self, topic: str, partition: int) -> list[str]:
        """The names of a partition's finished segments, in offset order."""
        folder = partition_dir(topic, partition)
        return await self.run(f"list {folder}", self._list_segments, folder)

    async def delete_prefix(self, prefix: str) -> None:
        """Delete the folder ``prefix`` and everything under it (a topic's: ``names.topic_dir``);
        a missing one is not an error."""
        if not prefix.strip("/"):
            raise ValueError("delete_prefix deletes a folder under the root, never the root")
        await self.run(f"delete {prefix}", self._delete_dir, prefix.strip("/"))

    def _path(self, name: str) -> str:
        return f"{self._root.rstrip('/')}/{name}"

    def _check(self) -> None:
        if self._local:
            self._fs.create_dir(self._root, recursive=True)
        container = self._root if self._local else self._root.split("/", 1)[0]
        if self._fs.get_file_info(container).type != pafs.FileType.Directory:
            raise FileNotFoundError(f"{container} is not there")

    def _put(self, name: str, data: bytes | pa.Buffer) -> None:
        if self._local:
            self._put_file(self._path(name), data)
        else:
            self._put_object(self._path(name), data)

    def _put_object(self, path: str, data: bytes | pa.Buffer) -> None:
        # The whole file in one write: the object appears when close completes the upload (one
        # PUT, or a multipart upload whose completion is skipped when a part failed, leaving an
        # upload that a bucket lifecycle rule for incomplete uploads cleans up).
        out = self._fs.open_output_stream(path)
        out.write(data)
        out.close()

    def _put_file(self, path: str, data: bytes | pa.Buffer) -> None:
        folder, _, base = path.rpartition("/")
        self._fs.create_dir(folder, recursive=True)
        temporary = f"{folder}/.{base}.{uuid.uuid4().hex}.tmp"
        try:
            with self._fs.open_output_stream(temporary) as out:
                out.write(data)
            _fsync(temporary, os.O_RDONLY)
            self._fs.move(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                self._fs.delete_file(temporary)
            raise
        _fsync(folder, os.O_RDONLY | os.O_DIRECTORY)  # the rename itself survives a power loss

    def _read(self, name: str, fn: Callable[[pa.NativeFile], T]) -> T:
        with self._fs.open_input_file(self._path(name)) as file:
            return fn(file)

    def _size(self, name: str) -> int:
        info = self._fs.get_file_info(self._path(name))
        if info.type != pafs.FileType.File or info.size is None:
            raise FileNotFoundError(f"{name} is not there")
        return int(info.size)

    def _delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(self._path(name))

    def _list_segments(self, folder: str) -> list[str]:
        selector = pafs.FileSelector(self._path(folder), allow_not_found=True)
        bases = sorted(info.base_name for info in self._fs.get_file_info(selector)
                       if info.type == pafs.FileType.File and is_segment_file(info.base_name))
        return [f"{folder}/{base}" for base in bases]

    def _delete_dir(self, prefix: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_dir(self._path(prefix))


def _fsync(path: str, flags: int) -> None:
    """Flush a local file or folder to disk (pyarrow's local streams do not)."""
    descriptor = os.open(path, flags)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
