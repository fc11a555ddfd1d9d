"""``SchemaRegistry``: the asyncio shell of the Schema Registry on every broker.

What it owns: this broker's ``RegistryState`` and the task that keeps it current by tailing
``_schemas`` partition 0; the single writer when this broker leads that partition; the
forwarding of writes to the writer when it does not. What it must not do: decide anything.
Every rule lives in ``broker.schemas.state``; this module moves records and requests.

Theory of operation
-------------------
* **The log.** ``_schemas`` has one partition, is compacted, and is created on the first
  write (replication factor 3, or fewer while fewer brokers are usable;
  ``min.insync.replicas`` 2 once there are 3), so a write acknowledged with acks=all is on
  at least two brokers and the registry survives any one broker's loss.
* **The tail.** Every broker reads the partition as a consumer does (through the
  ``PartitionRouter``: below the high watermark, so only committed records) and replays each
  record into its state. ``next_offset`` is the first offset not yet replayed. A new topic id
  (the topic was deleted and made again) or an offset out of range starts over from the log
  start with a fresh state.
* **The single writer.** The leader of partition 0 decides every write. Under one lock it
  (1) waits until its high watermark reaches its log end (records of an earlier leadership
  are committed) and its tail has replayed them, so its state holds every committed record;
  (2) asks the core for a ``Decision``; (3) appends the decision's records in its leadership
  (checked with no ``await`` before the append, so a record is never written in a leadership
  it was not decided in) with acks=all; (4) waits for its tail to replay them; then answers
  with the answer and the offset after its records. Ids come from the state's ``max_id``, so
  a new leader continues after the highest id ever written, and a write whose append failed
  is either in the log (and replayed by step 1 of the next write) or not: the state never
  runs ahead of the log. A broker that does not lead forwards the write
  (``POST /internal/broker/v1/schemas/write``) to the leader the metadata image names,
  retrying through a leader change within the write's time budget.
* **Reads.** ``read`` first asks the high watermark of the partition (wherever it is led)
  and waits for the tail to reach it, so a read that starts after a write was acknowledged,
  through any broker, sees it. A forwarded write also waits for the local tail to reach the
  writer's offset before it answers. If the partition cannot be reached within the read's
  budget (its leader is being replaced), the read is answered from the state as it is.

The clock is the event loop's; the partition is reached through ``SchemasLog``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

import aiohttp
import msgpack

from broker.errors import BrokerError
from broker.replica_manager import ReplicaError, ReplicaManager
from broker.replica_state import ACKS_ALL
from broker.router import INTERNAL_PREFIX, MSGPACK, PartitionRouter, as_replica_error
from broker.schemas.parse import Reference, SchemaText, text_of
from broker.schemas.records import KeyValue, decode_record, encode_record
from broker.schemas.state import (
    FORWARDING_FAILED,
    OPERATION_TIMEOUT,
    STORE_ERROR,
    Decision,
    RegistryError,
    RegistryState,
)
from common import netbind
from common.waits import wait_event
from metalog.client import ControllerUnavailableError
from metalog.commands import CreateTopic
from metalog.errors import MetadataError, TopicExistsError
from metalog.image import MetadataImage
from storage.batch import decode_records, encode_batch, iter_batches
from storage.errors import StorageError

log = logging.getLogger(__name__)

SCHEMAS_TOPIC = "_schemas"
PARTITION = 0
WRITE_PATH = f"{INTERNAL_PREFIX}/schemas/write"
FETCH_BYTES_MAX = 1 << 20
TAIL_WAIT_MS = 1000
BACKOFF_S = 0.1
CONNECT_TIMEOUT_S = 2.0

T = TypeVar("T")


@dataclass(frozen=True)
class RegistryConfig:
    replication_factor: int = 3
    min_insync_replicas: int = 2
    write_timeout_ms: int = 15_000
    """A write's whole budget, leader changes and forwarding included."""
    read_sync_timeout_ms: int = 3_000
    """How long a read waits to learn the high watermark and reach it before it is answered
    from the state as it is."""


class NotWriterError(Exception):
    """This broker does not lead ``_schemas`` partition 0 (any more)."""


class Leadership(NamedTuple):
    topic_id: str
    leader_epoch: int


class SchemasLog(Protocol):
    """``_schemas`` partition 0, as the registry needs it."""

    def topic_id(self) -> str | None:
        """The topic's id in this broker's metadata image; None if it does not exist."""
        ...

    def leader_id(self) -> int:
        """The leader the image names; -1 if none (or no topic)."""
        ...

    def leadership(self) -> Leadership | None:
        """This broker's leadership of the partition now; None if it does not lead it."""
        ...

    async def wait_committed(self, lead: Leadership) -> int:
        """Wait until the high watermark reaches the local log end; return that offset.
        ``NotWriterError`` if ``lead`` ends first."""
        ...

    async def append(self, lead: Leadership, records: list[KeyValue], timeout_ms: int) -> int:
        """Append in ``lead`` with acks=all; the offset after the records, once committed."""
        ...

    async def fetch(
        self, offset: int, max_wait_ms: int
    ) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        """Committed records from ``offset`` (``(offset, key, value)``) and the next offset."""
        ...

    async def high_watermark(self, timeout_ms: int) -> int: ...

    async def log_start(self) -> int: ...

    async def create_topic(self) -> None: ...


# ---------------------------------------------------------------- write operations

Args = Mapping[str, Any]


def _refs(args: Args) -> tuple[Reference, ...]:
    return tuple(Reference(str(n), str(s), int(v)) for n, s, v in args.get("references") or ())


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


OPS: dict[str, Callable[[RegistryState, Args], Decision[Any]]] = {
    "register": lambda st, a: st.decide_register(
        str(a["subject"]),
        SchemaText(str(a["schema_type"]), str(a["schema"]), _refs(a)),
        normalize=bool(a.get("normalize")),
        schema_id=_opt_int(a.get("id")),
        version=_opt_int(a.get("version")),
    ),
    "delete_version": lambda st, a: st.decide_delete_version(
        str(a["subject"]), int(a["version"]), bool(a.get("permanent"))
    ),
    "delete_subject": lambda st, a: st.decide_delete_subject(
        str(a["subject"]), bool(a.get("permanent"))
    ),
    "set_config": lambda st, a: st.decide_set_config(a.get("subject"), a.get("level")),
    "delete_config": lambda st, a: st.decide_delete_config(a.get("subject")),
    "set_mode": lambda st, a: st.decide_set_mode(
        a.get("subject"), a.get("mode"), bool(a.get("force"))
    ),
    "delete_mode": lambda st, a: st.decide_delete_mode(str(a["subject"])),
}
"""Each write the registry takes, as the core decides it. ``args`` is a msgpack-able map
(a registration's references are ``[name, subject, version]`` triples)."""


def register_args(
    subject: str,
    text: SchemaText,
    *,
    normalize: bool = False,
    schema_id: int | None = None,
    version: int | None = None,
) -> dict[str, Any]:
    return {
        "subject": subject,
        "schema_type": text.schema_type,
        "schema": text.schema,
        "references": [[r.name, r.subject, r.version] for r in text.references],
        "normalize": normalize,
        "id": schema_id,
        "version": version,
    }


# ---------------------------------------------------------------- the registry


class SchemaRegistry:
    """See the module docstring. ``start()``, ``read``/``write``, ``stop()``."""

    def __init__(
        self,
        *,
        broker_id: int,
        schemas_log: SchemasLog,
        leader_url: Callable[[int], str | None],
        config: RegistryConfig | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log = schemas_log
        self._leader_url = leader_url
        self.config = config or RegistryConfig()
        self.state = RegistryState()
        self.next_offset = 0
        """The first offset not replayed into ``state``."""
        self._topic_id: str | None = None
        self._progress = asyncio.Event()
        self._image_changed = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._session = netbind.LazySession(limit=32, connect_timeout_s=CONNECT_TIMEOUT_S)
        self._creating: asyncio.Task[None] | None = None
        self.skipped_records = 0

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run_tail(), name="schema-registry-tail"
        )

    async def stop(self) -> None:
        for task in (self._task, self._creating):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self._session.close()

    async def on_metadata(self, update: object) -> None:
        """A ``MetadataFollower`` listener: the tail looks at the topic again."""
        self._image_changed.set()

    # ------------------------------------------------------------ the tail

    def _reset(self, topic_id: str | None, start: int) -> None:
        self.state = RegistryState()
        self._topic_id = topic_id
        self.next_offset = start
        self._notify()

    def _notify(self) -> None:
        ev, self._progress = self._progress, asyncio.Event()
        ev.set()

    async def _run_tail(self) -> None:
        while True:
            try:
                await self._tail_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("broker %d: schema registry tail failed; retrying", self.broker_id)
                await asyncio.sleep(1.0)

    async def _tail_once(self) -> None:
        tid = self.log.topic_id()
        if tid is None:
            if self._topic_id is not None:
                self._reset(None, 0)
            self._image_changed.clear()
            await wait_event(self._image_changed, 0.5)
            return
        if tid != self._topic_id:
            log.info(
                "broker %d: reading %s (topic id %s) from the start",
                self.broker_id,
                SCHEMAS_TOPIC,
                tid,
            )
            self._reset(tid, 0)
        try:
            records, nxt = await self.log.fetch(self.next_offset, TAIL_WAIT_MS)
        except ReplicaError as e:
            if e.error_code == "OFFSET_OUT_OF_RANGE":
                start = await self.log.log_start()
                log.warning(
                    "broker %d: %s offset %d out of range; replaying from %d",
                    self.broker_id,
                    SCHEMAS_TOPIC,
                    self.next_offset,
                    start,
                )
                self._reset(tid, start)
            else:
                await asyncio.sleep(BACKOFF_S)
            return
        if self.log.topic_id() != tid:
            return  # the topic changed under the fetch: start over next time
        for offset, key, value in records:
            if offset < self.next_offset:
                continue
            try:
                rec = decode_record(key, value)
            except Exception as e:  # a foreign or corrupt record must not wedge the registry
                self.skipped_records += 1
                log.warning(
                    "broker %d: %s offset %d: skipping a record that does not decode: %s",
                    self.broker_id,
                    SCHEMAS_TOPIC,
                    offset,
                    e,
                )
                continue
            if rec is not None:
                self.state.replay(rec)
        if nxt > self.next_offset:
            self.next_offset = nxt
            self._notify()

    async def _wait_tail(self, offset: int, deadline: float) -> bool:
        """Wait until the tail has replayed every record before ``offset``."""
        while self.next_offset < offset:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await wait_event(self._progress, left)
        return True

    # ------------------------------------------------------------ reads

    async def read(self, fn: Callable[[RegistryState], T]) -> T:
        """``fn`` over a state that holds every write acknowledged before this call (unless
        the partition cannot be reached within ``read_sync_timeout_ms``)."""
        if self.log.topic_id() is not None:
            budget_ms = self.config.read_sync_timeout_ms
            deadline = time.monotonic() + budget_ms / 1000
            try:
                hw = await self.log.high_watermark(budget_ms)
            except (ReplicaError, BrokerError, StorageError) as e:
                log.info("broker %d: schema read answered without a sync (%s)", self.broker_id, e)
            else:
                await self._wait_tail(hw, deadline)
        return fn(self.state)

    # ------------------------------------------------------------ writes

    async def write(self, op: str, args: Args) -> Any:
        """Run one write on the single writer, wherever it is; its answer, once committed
        and replayed here. ``RegistryError`` for a refusal or a failure."""
        if op not in OPS:
            raise ValueError(f"unknown registry write {op!r}")
        deadline = time.monotonic() + self.config.write_timeout_ms / 1000
        await self._ensure_topic(deadline)
        last: str = "no leader yet"
        while True:
            leader = self.log.leader_id()
            try:
                if leader == self.broker_id:
                    response, offset = await self.write_local(op, args, deadline)
                elif leader >= 0:
                    response, offset = await self._forward(leader, op, args, deadline)
                else:
                    raise NotWriterError(f"{SCHEMAS_TOPIC}-{PARTITION} has no leader now")
            except NotWriterError as e:
                last = str(e)
            else:
                await self._wait_tail(offset, deadline)
                return response
            if time.monotonic() + BACKOFF_S >= deadline:
                raise RegistryError(
                    FORWARDING_FAILED if leader >= 0 else STORE_ERROR,
                    f"the registry's writer did not answer in time ({last})",
                )
            await asyncio.sleep(BACKOFF_S)

    async def write_local(self, op: str, args: Args, deadline: float) -> tuple[Any, int]:
        """The single writer: see the module docstring. ``NotWriterError`` if this broker
        does not lead the partition."""
        async with self._write_lock:
            lead = self.log.leadership()
            if lead is None:
                raise NotWriterError(
                    f"broker {self.broker_id} does not lead {SCHEMAS_TOPIC}-{PARTITION}"
                )
            end = await self.log.wait_committed(lead)
            if not await self._wait_tail(end, deadline):
                raise RegistryError(
                    OPERATION_TIMEOUT, "the registry's writer is still reading the log"
                )
            decision = OPS[op](self.state, args)
            if not decision.records:
                return decision.response, self.next_offset
            left_ms = max(int((deadline - time.monotonic()) * 1000), 1)
            try:
                after = await self.log.append(
                    lead, [encode_record(r) for r in decision.records], left_ms
                )
            except NotWriterError:
                raise
            except (ReplicaError, BrokerError, StorageError) as e:
                err = as_replica_error(e)
                if err.error_code in ("NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH"):
                    raise NotWriterError(str(err)) from None
                raise RegistryError(
                    STORE_ERROR, f"writing {SCHEMAS_TOPIC}: {err.error_code}: {err}"
                ) from None
            await self._wait_tail(after, deadline)
            return decision.response, after

    def _sess(self) -> aiohttp.ClientSession:
        return self._session.get()

    async def _forward(self, leader: int, op: str, args: Args, deadline: float) -> tuple[Any, int]:
        url = self._leader_url(leader)
        if url is None:
            raise NotWriterError(f"no endpoint for broker {leader}")
        left = deadline - time.monotonic()
        body = msgpack.packb(
            {"op": op, "args": dict(args), "timeout_ms": int(left * 1000)}, use_bin_type=True
        )
        try:
            async with self._sess().post(
                f"{url}{WRITE_PATH}",
                data=body,
                headers={"Content-Type": MSGPACK},
                timeout=aiohttp.ClientTimeout(
                    total=max(left, 0.05) + 1.0, sock_connect=CONNECT_TIMEOUT_S
                ),
            ) as resp:
                payload = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise NotWriterError(f"broker {leader} ({url}): {str(e) or type(e).__name__}") from None
        try:
            out = msgpack.unpackb(payload, raw=False)
        except (msgpack.UnpackException, ValueError):
            out = None
        if not isinstance(out, dict):
            raise NotWriterError(f"broker {leader} answered {payload[:200]!r}")
        if "error_code" in out:
            raise RegistryError(int(out["error_code"]), str(out.get("message", "")))
        if out.get("not_writer"):
            raise NotWriterError(str(out.get("message", "")))
        return out.get("response"), int(out["offset"])

    # ------------------------------------------------------------ the topic

    async def _ensure_topic(self, deadline: float) -> None:
        if self.log.topic_id() is not None and self.log.leader_id() >= 0:
            return
        if self.log.topic_id() is None:
            if self._creating is None or self._creating.done():
                self._creating = asyncio.get_running_loop().create_task(
                    self.log.create_topic(), name="create-schemas-topic"
                )
                self._creating.add_done_callback(lambda t: None if t.cancelled() else t.exception())
            try:
                await asyncio.shield(self._creating)
            except TopicExistsError:
                pass
            except (MetadataError, ControllerUnavailableError) as e:
                raise RegistryError(STORE_ERROR, f"creating {SCHEMAS_TOPIC}: {e}") from None
        while self.log.topic_id() is None or self.log.leader_id() < 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RegistryError(STORE_ERROR, f"{SCHEMAS_TOPIC} has no leader yet")
            self._image_changed.clear()
            await wait_event(self._image_changed, min(left, 0.2))


# ---------------------------------------------------------------- the port, over a broker


class ReplicaSchemasLog:
    """``SchemasLog`` over this broker's ``ReplicaManager`` (local leadership, appends) and
    ``PartitionRouter`` (fetches and offsets wherever the partition is led)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        router: PartitionRouter,
        image: Callable[[], MetadataImage | None],
        create: Callable[[CreateTopic], Awaitable[Any]],
        config: RegistryConfig | None = None,
    ) -> None:
        self.replicas = replicas
        self.router = router
        self.image = image
        self._create = create
        self.config = config or RegistryConfig()

    def topic_id(self) -> str | None:
        im = self.image()
        t = None if im is None else im.topics.get(SCHEMAS_TOPIC)
        return None if t is None else str(t.topic_id)

    def leader_id(self) -> int:
        im = self.image()
        t = None if im is None else im.topics.get(SCHEMAS_TOPIC)
        reg = None if t is None else t.partitions.get(PARTITION)
        return -1 if reg is None else int(reg.leader)

    def leadership(self) -> Leadership | None:
        rep = self.replicas.by_name.get((SCHEMAS_TOPIC, PARTITION))
        leader = None if rep is None else rep.leader
        if rep is None or leader is None or not leader.is_leader:
            return None
        return Leadership(str(rep.topic_id), leader.leader_epoch)

    def _check(self, lead: Leadership) -> None:
        if self.leadership() != lead:
            raise NotWriterError(f"leadership of {SCHEMAS_TOPIC}-{PARTITION} changed")

    async def wait_committed(self, lead: Leadership) -> int:
        while True:
            self._check(lead)
            rep = self.replicas.by_name[(SCHEMAS_TOPIC, PARTITION)]
            end = rep.log.log_end_offset
            if rep.high_watermark >= end:
                return end
            await wait_event(rep.changed, 0.5)

    async def append(self, lead: Leadership, records: list[KeyValue], timeout_ms: int) -> int:
        batch = encode_batch([(k, v, int(time.time() * 1000), ()) for k, v in records])
        # Checked with no await before the produce's own (synchronous) append.
        self._check(lead)
        out = await self.replicas.produce(SCHEMAS_TOPIC, PARTITION, ACKS_ALL, timeout_ms, batch)
        return int(out["last_offset"]) + 1

    async def fetch(
        self, offset: int, max_wait_ms: int
    ) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        try:
            out = await self.router.fetch(
                SCHEMAS_TOPIC,
                PARTITION,
                offset,
                max_bytes=FETCH_BYTES_MAX,
                max_wait_ms=max_wait_ms,
                timeout_ms=max_wait_ms + 5_000,
            )
        except (BrokerError, StorageError) as e:
            raise as_replica_error(e) from None
        data = bytes(out["records"])
        recs: list[tuple[int, bytes | None, bytes | None]] = []
        nxt = offset
        for pos, h in iter_batches(data):
            if not h.is_control:
                for r in decode_records(data[pos : pos + h.size]):
                    if r.offset >= offset:
                        recs.append((r.offset, r.key, r.value))
            nxt = max(nxt, h.next_offset)
        return recs, nxt

    async def high_watermark(self, timeout_ms: int) -> int:
        try:
            out = await self.router.list_offsets(
                SCHEMAS_TOPIC, PARTITION, -1, timeout_ms=timeout_ms
            )
        except (BrokerError, StorageError) as e:
            raise as_replica_error(e) from None
        return int(out["offset"])

    async def log_start(self) -> int:
        out = await self.router.list_offsets(SCHEMAS_TOPIC, PARTITION, -2)
        return int(out["offset"])

    async def create_topic(self) -> None:
        im = self.image()
        usable = 0 if im is None else len(im.brokers.usable())
        rf = min(self.config.replication_factor, usable)
        if rf < 1:
            raise MetadataError("no usable broker registered yet")
        cmd = CreateTopic(
            name=SCHEMAS_TOPIC,
            num_partitions=1,
            replication_factor=rf,
            configs={
                "cleanup.policy": "compact",
                "min.insync.replicas": str(min(self.config.min_insync_replicas, rf)),
            },
        )
        try:
            await self._create(cmd)
            log.info("created %s (replication factor %d)", SCHEMAS_TOPIC, rf)
        except TopicExistsError:
            pass


__all__ = [
    "SCHEMAS_TOPIC",
    "RegistryConfig",
    "ReplicaSchemasLog",
    "SchemaRegistry",
    "register_args",
    "text_of",
]
