"""The archive on an S3-compatible server (moto, started on loopback by the session fixture): every
behaviour of archive_behaviours through s3://, and an unreachable store."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pyarrow.fs as pafs
import pytest
from moto_server import MotoServer

from storage.archive.object_store import ArchiveStore, S3Settings, open_archive
from storage.archive.segments import write_segment
from storage.errors import ArchiveUnavailable
from streamgate_devstack.ports import LOOPBACK, free_port
from tests.unit.storage.archive.archive_behaviours import ArchiveBehaviours, numbered

BUCKET = "streamgate-archive"


def settings_for(server: MotoServer) -> S3Settings:
    return S3Settings(endpoint_override=server.endpoint, region=server.region,
                      access_key=server.access_key, secret_key=server.secret_key, scheme="http")


@pytest.fixture(scope="session")
def bucket(moto_s3: MotoServer) -> str:
    """The bucket the archive tests write into (each test under a prefix of its own)."""
    settings = settings_for(moto_s3)
    filesystem = pafs.S3FileSystem(
        access_key=settings.access_key, secret_key=settings.secret_key, region=settings.region,
        scheme="http", endpoint_override=settings.endpoint_override, allow_bucket_creation=True)
    filesystem.create_dir(BUCKET)
    return BUCKET


@pytest.fixture
async def store(moto_s3: MotoServer, bucket: str) -> AsyncIterator[ArchiveStore]:
    url = f"s3://{bucket}/tests/{uuid.uuid4().hex}"
    async with open_archive(url, settings_for(moto_s3)) as archive:
        yield archive


class TestS3Archive(ArchiveBehaviours):
    """Every behaviour on the S3-compatible server."""


async def test_an_unreachable_store_is_archive_unavailable() -> None:
    closed = S3Settings(endpoint_override=f"{LOOPBACK}:{free_port()}", region="us-east-1",
                        access_key="k", secret_key="s", scheme="http", connect_timeout_s=1,
                        max_attempts=1)
    async with open_archive(f"s3://{BUCKET}/x", closed) as archive:
        with pytest.raises(ArchiveUnavailable) as raised:
            await archive.list_segments("t", 0)
        assert isinstance(raised.value.__cause__, OSError)
        with pytest.raises(ArchiveUnavailable):
            await write_segment(archive, "t", 0, numbered(3))
        with pytest.raises(ArchiveUnavailable):
            await archive.check()


async def test_a_missing_bucket_is_archive_unavailable(moto_s3: MotoServer) -> None:
    async with open_archive("s3://no-such-bucket/x", settings_for(moto_s3)) as archive:
        with pytest.raises(ArchiveUnavailable):
            await archive.check()
        with pytest.raises(ArchiveUnavailable):
            await write_segment(archive, "t", 0, numbered(3))
