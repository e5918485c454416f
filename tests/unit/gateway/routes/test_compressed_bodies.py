"""Content-Encoding gzip/zstd on request bodies: decoded exactly, bounded by the decoded size,
errors mapped."""

from __future__ import annotations

import base64
import zlib
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from backports import zstd

from gateway.errors import Problem
from gateway.routes import bodies
from gateway.routes.bodies import inflate
from streamgate_client.compression import Compression, compress_body

Client = TestClient[Any, Any]
LIMIT = 64 * 1024  # the unit settings' max_batch_bytes


def gzip_member(data: bytes) -> bytes:
    return compress_body(data, "gzip")


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_inflate_returns_exactly_the_original_bytes(coding: Compression) -> None:
    original = bytes(range(256)) * 100 + b'{"messages": []}'
    assert inflate(compress_body(original, coding), coding, len(original)) == original


def test_concatenated_members_decode_as_one_body() -> None:
    assert inflate(gzip_member(b"abc") + gzip_member(b"def"), "gzip", 100) == b"abcdef"
    assert inflate(zstd.compress(b"abc") + zstd.compress(b"def"), "zstd", 100) == b"abcdef"


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_a_bomb_stops_inflating_one_byte_past_the_limit(coding: Compression,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = compress_body(b"\0" * (64 * 1024 * 1024), coding)
    assert len(bomb) < 100_000
    produced: list[int] = []
    real = bodies._inflater

    def counting(name: str) -> Any:
        inner = real(name)

        class Counting:
            eof = property(lambda self: inner.eof)
            unused_data = property(lambda self: inner.unused_data)

            def decompress(self, data: bytes, max_length: int = -1) -> bytes:
                out = inner.decompress(data, max_length)
                produced.append(len(out))
                return out

        return Counting()

    monkeypatch.setattr(bodies, "_inflater", counting)
    with pytest.raises(Problem) as refused:
        inflate(bomb, coding, LIMIT)
    assert refused.value.status == 413
    assert sum(produced) == LIMIT + 1


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_truncated_corrupt_or_trailing_garbage_bodies_are_400(coding: Compression) -> None:
    whole = compress_body(b"x" * 10_000 + bytes(range(256)), coding)
    for broken in (whole[:-6], b"not compressed at all", whole + b"garbage", b""):
        with pytest.raises(Problem) as refused:
            inflate(broken, coding, LIMIT)
        assert (refused.value.status, refused.value.slug) == (400, "undecodable-body"), broken[-10:]


@pytest.mark.parametrize("coding", ["gzip", "zstd", "GZIP", " zstd "])
async def test_compressed_publish_is_stored_as_if_sent_plain(
    client: Client, orders: str, store: Any, coding: str
) -> None:
    binary = bytes(range(256))
    body = orjson.dumps(
        {
            "messages": [
                {"key": "k", "value": {"n": 1, "s": "é"}},
                {"key": "k", "value_b64": base64.b64encode(binary).decode()},
            ]
        }
    )
    response = await client.post(
        f"/v1/topics/{orders}/messages",
        data=compress_body(body, coding.strip().lower()),  # type: ignore[arg-type]
        headers={"Content-Type": "application/json", "Content-Encoding": coding},
    )
    assert response.status == 200, await response.text()
    stored = [entry for stream in store.streams.values() for entry in stream]
    assert [entry.value for entry in stored] == [orjson.dumps({"n": 1, "s": "é"}), binary]


async def test_identity_encoding_is_the_plain_body(client: Client, orders: str) -> None:
    response = await client.post(
        f"/v1/topics/{orders}/messages", data=b'{"messages": [{"value": 1}]}',
        headers={"Content-Encoding": "identity"}
    )
    assert response.status == 200, await response.text()


@pytest.mark.parametrize("coding", ["br", "deflate", "gzip, zstd", "compress"])
async def test_unsupported_encoding_is_415(
        client: Client, orders: str, store: Any, coding: str) -> None:
    response = await client.post(f"/v1/topics/{orders}/messages", data=b"\x00\x01",
                                 headers={"Content-Encoding": coding})
    assert response.status == 415
    assert response.headers["Accept-Encoding"] == "gzip, zstd"
    assert response.content_type == "application/problem+json"
    assert (await response.json())["type"].endswith("/unsupported-encoding")
    assert store.total_entries() == 0


async def test_corrupt_gzip_publish_is_400_and_writes_nothing(
    client: Client, orders: str, store: Any
) -> None:
    body = gzip_member(b'{"messages": [{"value": 1}]}')
    response = await client.post(
        f"/v1/topics/{orders}/messages", data=body[:10] + b"\xff" * 8 + body[18:],
        headers={"Content-Encoding": "gzip"}
    )
    assert response.status == 400
    assert (await response.json())["type"].endswith("/undecodable-body")
    assert store.total_entries() == 0


async def test_body_inflating_past_the_limit_is_413(
        client: Client, orders: str, store: Any) -> None:
    body = orjson.dumps(
        {"messages": [{"value": "a" * (LIMIT // 2)}, {"value": "b" * (LIMIT // 2)}]}
    )
    compressed = zstd.compress(body)
    assert len(compressed) < LIMIT < len(body)
    response = await client.post(f"/v1/topics/{orders}/messages", data=compressed,
                                 headers={"Content-Encoding": "zstd"})
    assert response.status == 413
    assert store.total_entries() == 0


async def test_admin_bodies_accept_gzip_too(client: Client) -> None:
    body = zlib.compress(b'{"name": "zipped", "partitions": 2}', wbits=zlib.MAX_WBITS | 16)
    response = await client.post(
        "/v1/topics", data=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    assert response.status == 201, await response.text()
    assert (await response.json())["partitions"] == 2
