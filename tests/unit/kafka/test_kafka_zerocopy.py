"""The zero-copy Fetch answer's planning (``api.kafka.zerocopy``), over every Fetch version.

What is pinned: the parts ``splice`` makes, with each file range replaced by its bytes, are
byte for byte the frame the copy path encodes (so the size prefix and every records length
are right before anything is sent), for ranges beside copied records and ranges whose length
needs a longer prefix than the sentinel's; the handler plans a range only where the replica
answered one, and closes every range when it drops an answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import uvloop
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from api.kafka import handlers as h
from api.kafka import server as server_mod
from api.kafka.protocol import SUPPORTED, encode_response, is_flexible
from api.kafka.zerocopy import PlannedResponse, frame_size, splice
from metalog.image import MetadataImage
from storage.batch import as_kafka_batch, encode_batch
from storage.log import FileRange

FETCH_VERSIONS = list(range(SUPPORTED[1][0], SUPPORTED[1][1] + 1))


def ctx(replicas: Any) -> h.KafkaContext:
    async def nothing(*_: Any) -> Any:
        return None

    return h.KafkaContext(
        broker_id=101,
        cluster_id="c",
        image_fn=lambda: MetadataImage.EMPTY,
        replicas=replicas,
        groups=None,  # type: ignore[arg-type]
        next_producer_id=nothing,
        execute=nothing,
    )


def request(version: int, **fields: Any) -> Any:
    cls = load_request_schema(1, version)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def kafka_batch(n: int, value_bytes: int) -> bytes:
    return as_kafka_batch(encode_batch([(b"k", b"v" * value_bytes, 5, [])] * n))


class RangeReplicas:
    """Partition 0 answers a file range (when asked for one), partition 1 bytes."""

    by_name: dict[Any, Any] = {}

    def __init__(self, path: Path, sizes: tuple[int, ...]) -> None:
        self.batches = [kafka_batch(1, n) for n in sizes]
        path.write_bytes(b"junk" + b"".join(self.batches))
        self.path = path
        self.opened: list[FileRange] = []
        self.copied = kafka_batch(2, 3)

    async def fetch(self, **kw: Any) -> dict[str, Any]:
        ans: dict[str, Any] = {"high_watermark": 9, "log_start_offset": 0}
        if kw["partition"] == 1 or not kw.get("file_range"):
            ans["records"] = self.copied if kw["partition"] == 1 else b"".join(self.batches)
            return ans
        rng = FileRange(os.open(self.path, os.O_RDONLY), 4, sum(map(len, self.batches)), 1, 1, 0, 9)
        self.opened.append(rng)
        ans["records"] = rng
        return ans


def fetch_request(version: int, partitions: tuple[int, ...], min_bytes: int = 1) -> Any:
    mod = __import__(f"kio.schema.fetch.v{version}.request", fromlist=["x"])
    parts = tuple(
        h.build(
            mod,
            "FetchPartition",
            partition=i,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for i in partitions
    )
    return request(
        version,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=1 if min_bytes > 1 else 0),
        min_bytes=min_bytes,
        max_bytes=1 << 22,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(h.build(mod, "FetchTopic", topic="t", partitions=parts),),
        forgotten_topics_data=(),
        rack_id="",
    )


def materialize(parts: list[Any]) -> bytes:
    return b"".join(
        p if isinstance(p, bytes) else os.pread(p.fd, p.size_bytes, p.position) for p in parts
    )


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize("sizes", [(10,), (10, 300, 70000)])
def test_spliced_parts_are_the_copied_frame_byte_for_byte(
    tmp_path: Path, version: int, sizes: tuple[int, ...]
) -> None:
    reps = RangeReplicas(tmp_path / "seg.log", sizes)
    c = ctx(reps)
    copied = asyncio.run(h.handle_fetch(c, version, fetch_request(version, (0, 1))))
    c.fetch_zero_copy = True
    planned = asyncio.run(h.handle_fetch(c, version, fetch_request(version, (0, 1))))
    assert isinstance(planned, PlannedResponse) and len(planned.ranges) == 1
    frame = encode_response(1, version, 7, planned.body)
    parts = splice(frame, planned.ranges, is_flexible(1, version))
    expected = encode_response(1, version, 7, copied)
    assert materialize(parts) == expected
    assert frame_size(parts) == len(expected)
    assert [type(p) for p in parts] == [bytes, FileRange, bytes]
    flexible = is_flexible(1, version)
    out = entity_reader(load_response_schema(1, version))(expected, 8 + int(flexible))[0]
    assert bytes(out.responses[0].partitions[0].records) == b"".join(reps.batches)
    planned.close()
    assert all(r.fd == -1 for r in reps.opened)


def test_splice_refuses_a_frame_without_the_sentinel(tmp_path: Path) -> None:
    reps = RangeReplicas(tmp_path / "seg.log", (10,))
    c = ctx(reps)
    c.fetch_zero_copy = True
    planned = asyncio.run(h.handle_fetch(c, 12, fetch_request(12, (0,))))
    frame = encode_response(1, 12, 7, planned.body)
    ((sentinel, _),) = planned.ranges.items()
    with pytest.raises(ValueError, match="missing"):
        splice(frame.replace(sentinel, b"x" * 16), planned.ranges, True)
    with pytest.raises(ValueError, match="where a records field starts"):
        splice(frame, planned.ranges, False)  # a v12 frame read as v11's int32 lengths
    planned.close()


def test_ranges_of_an_answer_dropped_for_the_long_poll_are_closed(tmp_path: Path) -> None:
    # min_bytes above what the first read found: the handler waits and reads again; the
    # first read's ranges must not leak their descriptors.
    reps = RangeReplicas(tmp_path / "seg.log", (10,))
    c = ctx(reps)
    c.fetch_zero_copy = True
    planned = asyncio.run(h.handle_fetch(c, 12, fetch_request(12, (0,), min_bytes=1 << 20)))
    assert isinstance(planned, PlannedResponse)
    assert len(reps.opened) >= 2  # read, waited (the fake has nothing more), read again
    assert all(r.fd == -1 for r in reps.opened[:-1])
    planned.close()
    assert reps.opened[-1].fd == -1


# ------------------------------------------------------------------ the listener's shell


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_bytes_and_ranges_reach_a_slow_reader_in_order(
    tmp_path: Path, loop_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transport's bytes first (drained), then the range by sendfile, waiting for
    room as the reader lags, then the bytes after: on the stock loop and on uvloop."""
    payload = os.urandom(3 << 20)
    path = tmp_path / "seg.log"
    path.write_bytes(b"x" * 100 + payload)
    head, tail = b"H" * (8 << 20), b"T" * 10

    async def main() -> bytes:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def serve(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            rng = FileRange(os.open(path, os.O_RDONLY), 100, len(payload), 0, 0, 0, 0)
            drained = server_mod._drained

            async def held_then_drained(writer: asyncio.StreamWriter) -> None:
                held.append(writer.transport.get_write_buffer_size())
                await drained(writer)
                assert writer.transport.get_write_buffer_size() == 0

            monkeypatch.setattr(server_mod, "_drained", held_then_drained)
            try:
                # More head than the socket takes at once: the transport holds some.
                assert await server_mod.send_parts(w, [head, rng, tail]) == len(payload)
                assert rng.fd == -1  # closed once sent
                done.set_result(None)
            finally:
                w.close()

        srv = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        got = bytearray()
        while True:
            chunk = await r.read(1 << 16)
            if not chunk:
                break
            got += chunk
            if len(got) < 1 << 20:
                await asyncio.sleep(0.001)  # slow at first: the sender must wait for room
        await done
        w.close()
        srv.close()
        return bytes(got)

    held: list[int] = []
    waits = 0
    writable = server_mod._writable

    async def counted(loop: asyncio.AbstractEventLoop, fd: int) -> None:
        nonlocal waits
        waits += 1
        await writable(loop, fd)

    monkeypatch.setattr(server_mod, "_writable", counted)
    got = uvloop.run(main()) if loop_name == "uvloop" else asyncio.run(main())
    assert got == head + payload + tail
    assert held[0] > 0 and waits > 0  # both waits were taken, not skipped


def test_a_range_whose_file_was_cut_short_is_not_pretended_sent(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(b"y" * 5000)
    rng = FileRange(os.open(path, os.O_RDONLY), 0, 5000, 0, 0, 0, 0)
    os.truncate(path, 3000)  # as a truncation of the active segment would

    async def main() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        try:
            await server_mod._sendfile(a.fileno(), rng)
        finally:
            a.close()
            b.close()

    with pytest.raises(server_mod.RangeCutShortError, match="2000 bytes before"):
        asyncio.run(main())
    rng.close()


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_client_gone_mid_range_ends_the_send_with_a_connection_error(
    tmp_path: Path, loop_name: str
) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(os.urandom(16 << 20))
    outcome: list[BaseException | int] = []
    rng = FileRange(os.open(path, os.O_RDONLY), 0, 16 << 20, 0, 0, 0, 0)

    async def main() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def serve(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                outcome.append(await server_mod.send_parts(w, [b"head", rng]))
            except ConnectionError as e:
                outcome.append(e)
            finally:
                w.close()
                done.set_result(None)

        srv = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await asyncio.sleep(0.2)
        sock.recv(1 << 16)
        sock.close()  # a reset, with most of the range unsent
        async with asyncio.timeout(10):
            await done
        srv.close()

    uvloop.run(main()) if loop_name == "uvloop" else asyncio.run(main())
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionError)
    assert rng.fd == -1


def test_ranges_past_the_cap_are_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h, "FETCH_RANGES_MAX", 2)
    reps = RangeReplicas(tmp_path / "seg.log", (10,))
    c = ctx(reps)
    c.fetch_zero_copy = True
    req = fetch_request(12, (0, 0, 0))  # three asks of a partition that answers ranges
    planned = asyncio.run(h.handle_fetch(c, 12, req))
    assert isinstance(planned, PlannedResponse) and len(planned.ranges) == 2
    assert len(reps.opened) == 2
    parts = planned.body.responses[0].partitions
    assert bytes(parts[2].records) == b"".join(reps.batches)  # the third was copied
    planned.close()
