"""``AsyncConsumer`` without groups: assign partitions, seek, poll.

Kafka's consumer with manual assignment (``assign``), minus groups (those come with the
consumer groups issue). For each assigned partition with a position, one fetch is in flight
to the partition's leader at a time (``fetch`` route: long-polls up to ``max_wait_ms`` for
``fetch_min_bytes``, answers only records below the high watermark); its answer is decoded
and buffered until ``poll`` hands it out. So while the application processes one poll's
records, the next ones are already on their way (Kafka's fetch prefetching).

Positions: ``seek`` sets one; a partition assigned without one starts at
``auto_offset_reset`` ("earliest", "latest"; "none" raises ``NoOffsetError``), and so does a
position that fell out of the log (``OFFSET_OUT_OF_RANGE``, e.g. deleted by retention).
A fetch answered after a ``seek`` is dropped, so ``poll`` never returns records from before
the seek. A partition's error (a reset that failed, corrupt data) is raised by ``poll``
before it hands out anything: a poll either raises or returns records, so a raise never
moves a position past records the caller did not get. ``pause`` stops handing out (and
fetching) a partition's records without giving it up; the group consumer
(``api.client.group``) pauses partitions it is about to revoke.

``isolation_level`` (Kafka's ``isolation.level``): "read_uncommitted" (the default) reads up
to the high watermark; "read_committed" up to the last stable offset, without the records of
aborted transactions (the broker empties their batches, keeping the offsets, so the position
moves past them) and ``end_offsets``/``seek_to_end``/"latest" resets use the LSO, as Kafka's
consumer does. Control batches (transaction markers) are never records at either level.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from api.client.errors import ClientError
from api.client.security import ClientSecurity
from api.client.transport import (
    MetadataCache,
    Transport,
    call_with_retries,
    normalize_bootstrap,
)
from api.client.types import CREATE_TIME, EARLIEST, LATEST, ConsumerRecord, TopicPartition
from common.waits import wait_event
from storage.batch import decode_body, iter_batches
from storage.errors import StorageError

log = logging.getLogger(__name__)

RESETS = {"earliest": EARLIEST, "latest": LATEST, "none": None}
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class NoOffsetError(ClientError):
    def __init__(self, tp: TopicPartition, why: str) -> None:
        super().__init__("OFFSET_OUT_OF_RANGE", f"{tp}: {why} and auto_offset_reset='none'")
        self.tp = tp


@dataclass(eq=False)
class _Fetched:
    fetch_offset: int
    records: list[ConsumerRecord]
    next_offset: int
    high_watermark: int
    last_stable_offset: int = -1


@dataclass(eq=False)
class _PartitionState:
    position: int | None = None
    task: asyncio.Task[None] | None = None
    buffer: _Fetched | None = None
    error: ClientError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1


class AsyncConsumer:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        fetch_max_bytes: int = 1 << 20,
        fetch_min_bytes: int = 1,
        max_wait_ms: int = 500,
        auto_offset_reset: str = "latest",
        max_poll_records: int | None = None,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        check_crcs: bool = True,
        source_host: str | None = None,
        isolation_level: str = "read_uncommitted",
        security: ClientSecurity | None = None,
    ) -> None:
        if auto_offset_reset not in RESETS:
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none'")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError("isolation_level must be 'read_uncommitted' or 'read_committed'")
        self.isolation_level = isolation_level
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_min_bytes = fetch_min_bytes
        self.max_wait_ms = max_wait_ms
        self.auto_offset_reset = auto_offset_reset
        self.max_poll_records = max_poll_records
        self.request_timeout_s = request_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.check_crcs = check_crcs
        self.transport = Transport(
            request_timeout_s=self.request_timeout_s, source_host=source_host, security=security
        )
        self.metadata = MetadataCache(self.transport, normalize_bootstrap(bootstrap))
        self._parts: dict[TopicPartition, _PartitionState] = {}
        self._paused: set[TopicPartition] = set()
        self._arrived = asyncio.Event()
        self._closed = False

    async def start(self) -> None:
        await self.metadata.refresh(timeout_s=self.request_timeout_s)

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        for st in self._parts.values():
            await self._cancel(st)
        await self.transport.close()

    # ------------------------------------------------------------------ assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Replace the assignment. Positions of partitions that stay are kept."""
        new = [TopicPartition(*tp) for tp in partitions]
        for tp in list(self._parts):
            if tp not in new:
                st = self._parts.pop(tp)
                self._paused.discard(tp)
                if st.task is not None:
                    st.task.cancel()
        for tp in new:
            self._parts.setdefault(tp, _PartitionState())
        # A poll waiting on an empty (or smaller) assignment must start fetching the new one.
        self._arrived.set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._parts)

    def pause(self, *tps: TopicPartition) -> None:
        """Stop returning (and fetching) these partitions' records until ``resume``; their
        positions and any buffered records are kept (Kafka's ``pause``)."""
        for tp in tps:
            self._state(tp)
            self._paused.add(TopicPartition(*tp))

    def resume(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._paused.discard(TopicPartition(*tp))
        self._arrived.set()

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def positions(self) -> dict[TopicPartition, int]:
        """The known position of each assigned partition (none yet: left out, no reset)."""
        return {tp: st.position for tp, st in self._parts.items() if st.position is not None}

    async def partitions_for(self, topic: str) -> list[int]:
        parts = await self.metadata.partitions(topic, timeout_s=self.request_timeout_s)
        return sorted(parts)

    async def topics(self) -> list[str]:
        md = await self.metadata.refresh()
        return sorted(md.topics)

    def _state(self, tp: TopicPartition) -> _PartitionState:
        st = self._parts.get(TopicPartition(*tp))
        if st is None:
            raise ClientError("ILLEGAL_STATE", f"{tp} is not assigned")
        return st

    def seek(self, tp: TopicPartition, offset: int) -> None:
        st = self._state(tp)
        st.position = offset
        st.buffer = None
        st.error = None
        if st.task is not None:
            st.task.cancel()
            st.task = None

    async def position(self, tp: TopicPartition) -> int:
        st = self._state(tp)
        if st.position is None:
            await self._reset(TopicPartition(*tp), st, "no position")
        assert st.position is not None
        return st.position

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp, off in (await self.beginning_offsets(tps or list(self._parts))).items():
            self.seek(tp, off)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp, off in (await self.end_offsets(tps or list(self._parts))).items():
            self.seek(tp, off)

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._list_offsets({TopicPartition(*tp): EARLIEST for tp in tps})

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset the next committed record gets."""
        return await self._list_offsets({TopicPartition(*tp): LATEST for tp in tps})

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is >= the given one, or None past the end."""
        got = await self._list_offsets({TopicPartition(*tp): ts for tp, ts in times.items()})
        return {tp: (off if off >= 0 else None) for tp, off in got.items()}

    async def _list_offsets(self, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        results = await asyncio.gather(*(self._list_offset(tp, ts) for tp, ts in wanted.items()))
        return dict(zip(wanted, results, strict=True))

    async def _list_offset(self, tp: TopicPartition, timestamp: int) -> int:
        async def leader() -> str:
            return await self.metadata.leader_url(
                tp.topic, tp.partition, timeout_s=self.request_timeout_s
            )

        ans = await call_with_retries(
            self.metadata,
            leader,
            "list_offsets",
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "timestamp": timestamp,
                "isolation_level": self.isolation_level,
            },
            budget_s=self.request_timeout_s,
            backoff_s=self.retry_backoff_s,
        )
        return int(ans["offset"])

    # ------------------------------------------------------------------ polling

    async def _reset(self, tp: TopicPartition, st: _PartitionState, why: str) -> None:
        ts = RESETS[self.auto_offset_reset]
        if ts is None:
            raise NoOffsetError(tp, why)
        st.position = await self._list_offset(tp, ts)
        st.buffer = None

    async def _cancel(self, st: _PartitionState) -> None:
        if st.task is not None:
            st.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await st.task
            st.task = None

    def _start_fetch(self, tp: TopicPartition, st: _PartitionState) -> None:
        if st.task is None or st.task.done():
            st.task = asyncio.get_running_loop().create_task(
                self._fetch(tp, st), name=f"fetch-{tp}"
            )

    async def _fetch(self, tp: TopicPartition, st: _PartitionState) -> None:
        attempt = 0
        while not self._closed:
            offset = st.position
            if offset is None:
                try:
                    await self._reset(tp, st, "no position")
                except ClientError as e:
                    st.error = e
                    self._arrived.set()
                    return
                continue
            try:
                url = await self.metadata.leader_url(
                    tp.topic, tp.partition, timeout_s=self.request_timeout_s
                )
                ans = await self.transport.call(
                    url,
                    "fetch",
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "replica_id": -1,
                        "fetch_offset": offset,
                        "max_bytes": self.fetch_max_bytes,
                        "max_wait_ms": self.max_wait_ms,
                        "min_bytes": self.fetch_min_bytes,
                        "isolation_level": self.isolation_level,
                    },
                    timeout_s=self.request_timeout_s + self.max_wait_ms / 1000,
                )
            except ClientError as e:
                if e.code == "OFFSET_OUT_OF_RANGE":
                    try:
                        await self._reset(tp, st, f"offset {offset} is out of range")
                    except ClientError as e2:
                        st.error = e2
                        self._arrived.set()
                        return
                    continue
                if not e.retriable:
                    st.error = e
                    self._arrived.set()
                    return
                attempt += 1
                if e.refresh_metadata:
                    with contextlib.suppress(ClientError):
                        await self.metadata.refresh()
                await asyncio.sleep(min(self.retry_backoff_s * attempt, 1.0))
                continue
            attempt = 0
            if st.position != offset:
                continue  # a seek happened while we fetched
            try:
                fetched = self._decode(tp, offset, ans)
            except (ClientError, StorageError) as e:
                # Corrupt data is reported, never handed out (the position stays put).
                st.error = (
                    e
                    if isinstance(e, ClientError)
                    else ClientError("CORRUPT_MESSAGE", f"{tp} at offset {offset}: {e}")
                )
                self._arrived.set()
                return
            st.high_watermark = fetched.high_watermark
            st.last_stable_offset = fetched.last_stable_offset
            if fetched.records or fetched.next_offset > offset:
                st.buffer = fetched
                self._arrived.set()
                return
            # Nothing new within max_wait_ms: ask again (poll's own timeout decides when to
            # give up waiting).

    def _decode(self, tp: TopicPartition, offset: int, ans: dict[str, Any]) -> _Fetched:
        data: bytes = ans.get("records") or b""
        out: list[ConsumerRecord] = []
        next_offset = offset
        mv = memoryview(data)
        topic, part = tp.topic, tp.partition
        for pos, h in iter_batches(mv, verify=self.check_crcs):
            next_offset = max(next_offset, h.next_offset)
            if h.next_offset <= offset or h.is_control:
                continue
            _, rows = decode_body(mv[pos : pos + h.size], verify=False)
            base, ts0 = h.base_offset, h.first_timestamp
            try:
                # One tuple per record, straight from the msgpack rows: this loop is the
                # consumer's per-record cost.
                recs = [
                    ConsumerRecord(
                        topic,
                        part,
                        base + od,
                        ts0 + td,
                        CREATE_TIME,
                        k,
                        v,
                        tuple(map(tuple, hs)) if hs else (),
                    )
                    for od, td, k, v, hs in rows
                ]
            except (TypeError, ValueError) as e:
                raise ClientError("CORRUPT_MESSAGE", f"{tp} at {base}: {e}") from e
            if base < offset:
                recs = [r for r in recs if r.offset >= offset]
            out += recs
        return _Fetched(
            offset,
            out,
            next_offset,
            int(ans.get("high_watermark", -1)),
            int(ans.get("last_stable_offset", -1)),
        )

    async def poll(
        self, timeout_ms: int = 1000, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records of the assigned partitions, in offset order within each partition; an
        empty list if none arrived within ``timeout_ms``."""
        limit = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            # Errors first, before any record is taken: a poll that raised after taking
            # another partition's records would have moved that position past records
            # nobody received (a transactional processor then committed offsets past
            # inputs it never saw: docs/fault-injection.md, finding 14). Those records stay
            # buffered for the next poll. (Kafka's fetcher returns what it collected and
            # throws at the next call, to the same end.)
            for tp, st in self._parts.items():
                if st.error is not None and tp not in self._paused:
                    err, st.error = st.error, None
                    raise err
            out: list[ConsumerRecord] = []
            for tp, st in self._parts.items():
                if tp in self._paused:
                    continue
                if st.buffer is not None:
                    room = None if limit is None else limit - len(out)
                    if room is not None and room <= 0:
                        break
                    self._take(st, out, room)
                if st.buffer is None:
                    self._start_fetch(tp, st)
            if out or self._closed:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            self._arrived.clear()
            if any(
                (st.buffer is not None or st.error is not None) and tp not in self._paused
                for tp, st in self._parts.items()
            ):
                continue
            await wait_event(self._arrived, left)

    def _take(self, st: _PartitionState, out: list[ConsumerRecord], room: int | None) -> None:
        buf = st.buffer
        assert buf is not None
        if room is None or len(buf.records) <= room:
            out.extend(buf.records)
            st.position = buf.next_offset
            st.buffer = None
        else:
            taken = buf.records[:room]
            out.extend(taken)
            buf.records = buf.records[room:]
            st.position = taken[-1].offset + 1
            buf.fetch_offset = st.position

    def high_watermark(self, tp: TopicPartition) -> int:
        """The partition's high watermark as of its latest fetch (-1 before any)."""
        return self._state(tp).high_watermark

    def last_stable_offset(self, tp: TopicPartition) -> int:
        """The partition's last stable offset as of its latest fetch (-1 before any)."""
        return self._state(tp).last_stable_offset

    def lag(self, tp: TopicPartition) -> int | None:
        """Records left to read as of the latest fetch, by Kafka's rule for the isolation
        level: up to the HW (read_uncommitted) or the LSO (read_committed); None if unknown."""
        st = self._state(tp)
        end = (
            st.last_stable_offset if self.isolation_level == "read_committed" else st.high_watermark
        )
        if end < 0 or st.position is None:
            return None
        return max(0, end - st.position)
