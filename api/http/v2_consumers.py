"""REST Proxy v2 consumer instances: group consumption for curl users, on every broker.

The Confluent REST Proxy's v2 consumer API, in its shapes and error codes (docs/http-api.md,
"Consumer groups (v2 consumer instances)"):

``POST /consumers/{group}`` creates an instance (``name``, ``format`` binary|json|string|avro|
jsonschema (the last two decode each record through the schema whose id it carries, by the
broker's registry: ``api.http.embedded``),
``auto.offset.reset``, ``auto.commit.enable``, ``fetch.min.bytes``,
``consumer.request.timeout.ms``) and answers ``{instance_id, base_uri}``; under
``/consumers/{group}/instances/{name}``: ``DELETE``; ``subscription`` (POST/GET/DELETE,
``topics`` or ``topic_pattern``); ``assignments`` (POST/GET, manual assignment);
``positions``, ``positions/beginning``, ``positions/end``; ``records`` (GET, ``timeout``,
``max_bytes``, ``Accept: application/vnd.kafka.<fmt>.v2+json``); ``offsets`` (POST commits,
GET reads the committed offsets).

An instance lives in the broker process that created it (as in the REST Proxy: kafka-rest#1057),
so ``base_uri`` names this broker's advertised URL, not whatever host a load balancer showed
the client; any other broker answers 404/40403 "Consumer instance not found.". A subscribing
instance wraps an ``AsyncGroupConsumer`` (a real member of the group: joins, heartbeats,
commits fenced by generation), a manually assigned one an ``AsyncConsumer`` whose commits go
to the coordinator as a simple consumer's (member "" and generation -1). Both are created at
the first subscribe or assign, and closed (leaving the group) by unsubscribe, ``DELETE``, or
expiry after ``consumer_instance_timeout_ms`` (Kafka REST's ``consumer.instance.timeout.ms``)
without a request.

What the REST Proxy's users complained about (the issues cited), and what is done here
instead: requests on one instance are serialized by its lock, so concurrent polls cannot
interleave (redpanda PR #31423); ``records`` waits up to ``timeout`` for data, through a
rebalance, instead of answering ``[]`` at once (kafka-rest#725); records carry ``timestamp``
and ``headers`` (kafka-rest#1133); a manually assigned instance resumes from the group's
committed offsets (redpanda#12772).

The records an answer returns are exactly the ones the instance's position moved past (a
``max_bytes`` cut moves the position back), so committing "everything consumed" never
commits a record nobody saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
from aiohttp import web

from api.client.consumer import AsyncConsumer
from api.client.errors import ClientError, CommitFailedError
from api.client.group import AsyncGroupConsumer
from api.client.transport import call_with_retries
from api.client.types import EARLIEST, LATEST, ConsumerRecord, TopicPartition
from api.http.context import ctx_of, int_param, json_body
from api.http.embedded import SCHEMA_FORMATS, EmbeddedCodec
from api.http.errors import HttpError, kafka_error, not_acceptable, unprocessable
from api.http.groups import GROUPS_KEY, GroupAccess, coordinator_error
from api.http.records import parse_timestamp, render_value
from api.http.v2 import codec_of
from api.http.v3 import READ_TIMEOUT_MS_MAX

log = logging.getLogger(__name__)

V2 = "application/vnd.kafka.v2+json"
FORMATS = ("binary", "json", "string", *SCHEMA_FORMATS)
RESETS = ("earliest", "latest", "none")

INSTANCE_TIMEOUT_MS_DEFAULT = 300_000
"""Kafka REST's ``consumer.instance.timeout.ms`` default."""
REQUEST_TIMEOUT_MS_DEFAULT = 1_000
"""Kafka REST's ``consumer.request.timeout.ms`` default: how long ``records`` waits."""
MAX_BYTES_DEFAULT = 64 << 20
"""Kafka REST's ``consumer.request.max.bytes`` default."""
INSTANCES_MAX = 1_000
"""Per broker: each instance holds a client session and, subscribed, a group membership."""
AUTO_COMMIT_INTERVAL_MS = 5_000
CLOSE_TIMEOUT_S = 10.0


def instance_not_found() -> HttpError:
    return HttpError(404, "Consumer instance not found.", 40403)


def already_subscribed(what: str) -> HttpError:
    # Kafka's IllegalStateException "Subscription to topics, partitions and pattern are
    # mutually exclusive", which the REST Proxy answers 409/40901.
    return HttpError(
        409,
        f"Subscription to topics, partitions and pattern are mutually "
        f"exclusive: this consumer instance already {what}; DELETE its "
        "subscription first.",
        40901,
    )


def illegal_state(message: str) -> HttpError:
    return HttpError(409, message, 40903)


def bad_config(message: str) -> HttpError:
    return HttpError(422, message, 42204)


def _response(data: Any, status: int = 200, content_type: str = V2) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type=content_type)


def _no_content() -> web.Response:
    return web.Response(status=204)


# --------------------------------------------------------------------------- parsing


def _bool(v: Any, name: str) -> bool:
    # The REST Proxy's create body carries configs as strings ("true") or JSON values.
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise bad_config(f"'{name}' must be true or false, got {v!r}.")


def _int(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool):
        raise bad_config(f"'{name}' must be an integer, got {v!r}.")
    try:
        n = int(v)
    except (TypeError, ValueError):
        raise bad_config(f"'{name}' must be an integer, got {v!r}.") from None
    if not lo <= n <= hi:
        raise bad_config(f"'{name}' must be between {lo} and {hi}, got {n}.")
    return n


_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def _partitions(body: Any, key: str = "partitions") -> list[TopicPartition]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise unprocessable(f'The body must be {{"{key}": [{{"topic", "partition"}}, ...]}}.')
    out = []
    for it in items:
        if (
            not isinstance(it, dict)
            or not isinstance(it.get("topic"), str)
            or isinstance(it.get("partition"), bool)
            or not isinstance(it.get("partition"), int)
            or it["partition"] < 0
        ):
            raise unprocessable(
                f'Each of \'{key}\' must be {{"topic": string, "partition": integer >= 0}}.'
            )
        out.append(TopicPartition(it["topic"], it["partition"]))
    return out


def _tp_values(body: Any, key: str, field: str) -> dict[TopicPartition, Any]:
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise unprocessable(f"'{key}' must be a list.")
    out: dict[TopicPartition, Any] = {}
    for it in items:
        if not isinstance(it, dict) or field not in it:
            raise unprocessable(f'Each of \'{key}\' must be {{"topic", "partition", "{field}"}}.')
        (tp,) = _partitions({"p": [it]}, "p")
        out[tp] = it[field]
    return out


def _offset(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise unprocessable(f"An offset must be an integer >= 0, got {v!r}.")
    return v


def _tps_json(tps: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(tps)]


# --------------------------------------------------------------------------- instances


class ConsumerInstance:
    """One v2 consumer instance. Every operation runs under ``lock`` (the handlers take it
    through ``ConsumerInstances.using``): the consumers underneath are not made for
    concurrent polls, and a seek racing a poll could hand out records from before it."""

    def __init__(
        self,
        group: str,
        name: str,
        *,
        fmt: str,
        auto_offset_reset: str,
        auto_commit: bool,
        fetch_min_bytes: int,
        request_timeout_ms: int,
        bootstrap: list[str],
        access: GroupAccess,
        instance_timeout_ms: int,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        self.group = group
        self.isolation_level = isolation_level
        self.name = name
        self.fmt = fmt
        self.auto_offset_reset = auto_offset_reset
        self.auto_commit = auto_commit
        self.fetch_min_bytes = fetch_min_bytes
        self.request_timeout_ms = request_timeout_ms
        self.bootstrap = bootstrap
        self.access = access
        self.instance_timeout_ms = instance_timeout_ms
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self.closed = False
        self.mode: str | None = None
        """None, "topics", "pattern" (subscribed: ``member``) or "assign" (``assigned``)."""
        self.member: AsyncGroupConsumer | None = None
        self.assigned: AsyncConsumer | None = None
        self._record_bytes = 256.0  # running mean, to size polls to max_bytes
        self._last_auto_commit = time.monotonic()

    # ------------------------------------------------------------------ subscribe

    async def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        kind = "topics" if topics is not None else "pattern"
        if self.mode == "assign":
            raise already_subscribed("has a manual assignment")
        if self.mode is not None and self.mode != kind:
            raise already_subscribed(f"subscribed by {self.mode}")
        if self.member is None:
            # The member's poll interval is the instance's idleness limit plus slack: an
            # instance nobody polls is closed by expiry (a clean leave) before the
            # coordinator would drop it for not polling.
            m = AsyncGroupConsumer(
                self.bootstrap,
                group_id=self.group,
                client_id=self.name,
                auto_offset_reset=self.auto_offset_reset,
                enable_auto_commit=self.auto_commit,
                auto_commit_interval_ms=AUTO_COMMIT_INTERVAL_MS,
                max_poll_interval_ms=max(300_000, self.instance_timeout_ms + 30_000),
                fetch_min_bytes=self.fetch_min_bytes,
                isolation_level=self.isolation_level,
            )
            await m.start()
            self.member = m
        if topics is not None:
            self.member.subscribe(topics)
        else:
            self.member.subscribe(pattern=pattern)
        self.mode = kind

    def subscription(self) -> list[str]:
        if self.member is None:
            return []
        return sorted(self.member.subscription())

    async def unsubscribe(self) -> None:
        """Kafka's ``unsubscribe``: leaves the group and drops a manual assignment too."""
        await self._close_consumers()
        self.mode = None

    # ------------------------------------------------------------------ assign

    async def assign(self, tps: list[TopicPartition]) -> None:
        if self.mode in ("topics", "pattern"):
            raise already_subscribed(f"subscribed by {self.mode}")
        if self.assigned is None:
            c = AsyncConsumer(
                self.bootstrap,
                auto_offset_reset=self.auto_offset_reset,
                fetch_min_bytes=self.fetch_min_bytes,
                isolation_level=self.isolation_level,
            )
            await c.start()
            self.assigned = c
        before = self.assigned.assignment()
        self.assigned.assign(tps)
        self.mode = "assign"
        new = [tp for tp in tps if tp not in before]
        if new:
            # Resume from the group's commits, as Kafka's consumer does for an assigned
            # partition without a position; the rest start at auto.offset.reset.
            for tp, off in (await self._fetch_committed(new)).items():
                self.assigned.seek(tp, off)

    def assignment(self) -> set[TopicPartition]:
        c = self._consumer_or_none()
        return set() if c is None else set(c.assignment())

    # ------------------------------------------------------------------ positions

    def _consumer_or_none(self) -> AsyncConsumer | AsyncGroupConsumer | None:
        return self.member if self.mode in ("topics", "pattern") else self.assigned

    def _consumer(self) -> AsyncConsumer | AsyncGroupConsumer:
        c = self._consumer_or_none()
        if c is None:
            raise illegal_state(
                "Consumer is not subscribed to any topics or assigned any partitions."
            )
        return c

    def _check_assigned(self, tps: Iterable[TopicPartition]) -> AsyncConsumer | AsyncGroupConsumer:
        c = self._consumer()
        owned = set(c.assignment())
        missing = sorted(set(tps) - owned)
        if missing:
            raise illegal_state(
                f"No current assignment for partition(s) {', '.join(str(tp) for tp in missing)}."
            )
        return c

    def seek(self, offsets: dict[TopicPartition, int]) -> None:
        c = self._check_assigned(offsets)
        for tp, off in offsets.items():
            c.seek(tp, off)

    async def seek_to(self, tps: list[TopicPartition], where: int) -> None:
        c = self._check_assigned(tps)
        if not tps:
            return
        fn = c.seek_to_beginning if where == EARLIEST else c.seek_to_end
        r = fn(*tps)
        if inspect.isawaitable(r):
            await r

    async def seek_to_times(self, times: dict[TopicPartition, int]) -> None:
        c = self._check_assigned(times)
        found = await list_offsets(self.access, times, self.isolation_level)
        ends = await list_offsets(
            self.access,
            {tp: LATEST for tp, off in found.items() if off < 0},
            self.isolation_level,
        )
        for tp in times:
            off = found[tp]
            # No record at or after the time: the end, as kafka-consumer-groups resets do.
            c.seek(tp, off if off >= 0 else ends[tp])

    # ------------------------------------------------------------------ records

    async def records(self, timeout_ms: int, max_bytes: int) -> list[ConsumerRecord]:
        c = self._consumer()
        deadline = time.monotonic() + timeout_ms / 1000
        await self._maybe_auto_commit()
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            cap = max(1, int(max_bytes // max(self._record_bytes, 1.0)))
            t0 = time.monotonic()
            try:
                recs = await c.poll(timeout_ms=left_ms, max_records=cap)
            except ClientError as e:
                raise kafka_error(e.code, e.message) from None
            if recs or left_ms <= 0:
                break
            # A member answers [] while it rejoins; keep waiting out the caller's timeout
            # (kafka-rest#725) without spinning if it returns at once.
            if time.monotonic() - t0 < 0.01:
                await asyncio.sleep(0.02)
        out: list[ConsumerRecord] = []
        size = 0
        for i, r in enumerate(recs):
            n = len(r.key or b"") + len(r.value or b"")
            if out and size + n > max_bytes:
                self._rewind(c, recs[i:])
                break
            out.append(r)
            size += n
        if out:
            self._record_bytes = 0.8 * self._record_bytes + 0.2 * (size / len(out))
        return out

    def rewind(self, recs: list[ConsumerRecord]) -> None:
        """Give back records that will not be answered (a rendering error)."""
        self._rewind(self._consumer(), recs)

    @staticmethod
    def _rewind(c: AsyncConsumer | AsyncGroupConsumer, recs: list[ConsumerRecord]) -> None:
        first: dict[TopicPartition, int] = {}
        for r in recs:
            tp = TopicPartition(r.topic, r.partition)
            first[tp] = min(first.get(tp, r.offset), r.offset)
        for tp, off in first.items():
            c.seek(tp, off)

    # ------------------------------------------------------------------ offsets

    def _positions(self) -> dict[TopicPartition, int]:
        """What was consumed: the position of every assigned partition that has one (Kafka's
        ``allConsumed``) of a manual assignment; a partition never polled has nothing consumed
        to commit. (A subscribed member's ``commit()`` does the same itself.)"""
        return {} if self.assigned is None else self.assigned.positions()

    async def commit(self, offsets: dict[TopicPartition, int] | None) -> None:
        """``offsets`` are next offsets to read (the REST body's offset + 1); None commits
        what was consumed: the current positions."""
        c = self._consumer()
        if isinstance(c, AsyncGroupConsumer):
            try:
                await c.commit(offsets)
            except CommitFailedError as e:
                raise illegal_state(
                    f"Commit failed: {e}. The group rebalanced; the "
                    "partitions may belong to another member now."
                ) from None
            except ClientError as e:
                raise coordinator_error(e) from None
            return
        await self._simple_commit(offsets if offsets is not None else self._positions())

    async def _simple_commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        ans = await self.access.call(
            self.group,
            "commit",
            {
                "member_id": "",
                "generation": -1,
                "offsets": [[tp.topic, tp.partition, off, ""] for tp, off in offsets.items()],
            },
        )
        err = str(ans.get("error") or "NONE")
        refused = ans.get("partition_errors") or []
        if err == "NONE" and refused:
            # Kafka's OffsetCommit: a topic the principal may not READ is refused per
            # partition, the others are committed (issue 18).
            raise kafka_error(
                str(refused[0][2]),
                f"offsets of {sorted((str(e[0]), int(e[1])) for e in refused)} were not "
                "committed (the others were)",
            )
        if err != "NONE":
            raise illegal_state(
                f"Commit refused: {err}. A manually assigned consumer "
                "commits as a simple consumer, which the coordinator accepts "
                "only while the group has no members."
            )
        self._last_auto_commit = time.monotonic()

    async def _maybe_auto_commit(self) -> None:
        # A subscribed member auto-commits itself; a manual assignment is committed here,
        # on poll, as Kafka's consumer does (what the previous answers handed out).
        if (
            self.mode != "assign"
            or not self.auto_commit
            or time.monotonic() - self._last_auto_commit < AUTO_COMMIT_INTERVAL_MS / 1000
        ):
            return
        try:
            await self._simple_commit(self._positions())
        except HttpError as e:
            log.info(
                "consumer instance %s/%s: auto-commit failed: %s", self.group, self.name, e.message
            )
            self._last_auto_commit = time.monotonic()

    async def committed(self, tps: list[TopicPartition] | None) -> list[dict[str, Any]]:
        if tps is None:
            tps = sorted(self.assignment())
        got = await self._fetch_committed_rows(tps)
        return [
            {"topic": t, "partition": p, "offset": off, "metadata": md or ""}
            for t, p, off, md in got
        ]

    async def _fetch_committed_rows(
        self, tps: list[TopicPartition]
    ) -> list[tuple[str, int, int, str]]:
        if not tps:
            return []
        ans = await self.access.call(
            self.group, "fetch_offsets", {"partitions": [[tp.topic, tp.partition] for tp in tps]}
        )
        rows = []
        for row in ans.get("offsets") or []:
            t, p, off, md = row[0], row[1], row[2], row[3]
            if off is not None and int(off) >= 0:
                rows.append((str(t), int(p), int(off), str(md or "")))
        return sorted(rows)

    async def _fetch_committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {TopicPartition(t, p): off for t, p, off, _ in await self._fetch_committed_rows(tps)}

    # ------------------------------------------------------------------ closing

    async def _close_consumers(self) -> None:
        member, assigned = self.member, self.assigned
        self.member = self.assigned = None
        if assigned is not None:
            if self.auto_commit and self.mode == "assign":
                with contextlib.suppress(HttpError, ClientError):
                    await self._simple_commit_positions(assigned)
            await assigned.close()
        if member is not None:
            # close() commits (with auto-commit) and leaves the group; a coordinator out of
            # reach must not hold up a DELETE or the broker's shutdown for long.
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await member.close()
            except (TimeoutError, ClientError) as e:
                log.warning("consumer instance %s/%s: close: %s", self.group, self.name, e)

    async def _simple_commit_positions(self, c: AsyncConsumer) -> None:
        await self._simple_commit(c.positions())

    async def close(self) -> None:
        self.closed = True
        await self._close_consumers()


class ConsumerInstances:
    """The instances of this broker, by (group, name), and the task that expires idle ones."""

    def __init__(
        self,
        *,
        bootstrap: list[str],
        advertised_url: str,
        access: GroupAccess,
        instance_timeout_ms: int = INSTANCE_TIMEOUT_MS_DEFAULT,
    ) -> None:
        self.bootstrap = bootstrap
        self.advertised_url = advertised_url.rstrip("/")
        self.access = access
        self.instance_timeout_ms = instance_timeout_ms
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._reaper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._instances)

    def create(self, group: str, name: str, **options: Any) -> ConsumerInstance:
        if (group, name) in self._instances:
            raise HttpError(
                409,
                "Consumer with specified consumer ID already exists in the "
                "specified consumer group.",
                40902,
            )
        if len(self._instances) >= INSTANCES_MAX:
            raise HttpError(
                429,
                f"This broker already has {INSTANCES_MAX} consumer "
                "instances; delete some or use another broker.",
                42901,
            )
        inst = ConsumerInstance(
            group,
            name,
            bootstrap=self.bootstrap,
            access=self.access,
            instance_timeout_ms=self.instance_timeout_ms,
            **options,
        )
        self._instances[(group, name)] = inst
        self._ensure_reaper()
        return inst

    def get(self, group: str, name: str) -> ConsumerInstance:
        inst = self._instances.get((group, name))
        if inst is None or inst.closed:
            raise instance_not_found()
        return inst

    @contextlib.asynccontextmanager
    async def using(self, group: str, name: str) -> AsyncIterator[ConsumerInstance]:
        """The instance, locked, its idleness clock reset at both ends of the request."""
        inst = self.get(group, name)
        inst.last_used = time.monotonic()
        async with inst.lock:
            if inst.closed:  # expired or deleted while this request waited
                raise instance_not_found()
            try:
                yield inst
            except ClientError as e:  # the client library's refusals, in the REST shape
                raise kafka_error(e.code, e.message) from None
            finally:
                inst.last_used = time.monotonic()

    async def delete(self, group: str, name: str) -> None:
        inst = self.get(group, name)
        self._instances.pop((group, name), None)
        async with inst.lock:
            await inst.close()

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(
                self._reap(), name="consumer-instances"
            )

    async def _reap(self) -> None:
        timeout_s = self.instance_timeout_ms / 1000
        interval_s = min(max(timeout_s / 10, 0.05), 5.0)
        while self._instances:
            await asyncio.sleep(interval_s)
            now = time.monotonic()
            for key, inst in list(self._instances.items()):
                # An instance with a request running or waiting is not idle.
                if inst.lock.locked() or now - inst.last_used < timeout_s:
                    continue
                self._instances.pop(key, None)
                log.info(
                    "consumer instance %s/%s expired after %.0f s without a request",
                    inst.group,
                    inst.name,
                    now - inst.last_used,
                )
                try:
                    async with inst.lock:
                        await inst.close()
                except Exception:
                    log.exception("closing expired consumer instance %s/%s", *key)

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        instances = list(self._instances.values())
        self._instances.clear()
        if instances:
            await asyncio.gather(*(i.close() for i in instances), return_exceptions=True)


INSTANCES_KEY: web.AppKey[ConsumerInstances] = web.AppKey("consumer_instances", ConsumerInstances)


async def list_offsets(
    access: GroupAccess,
    wanted: dict[TopicPartition, int],
    isolation_level: str = "read_uncommitted",
) -> dict[TopicPartition, int]:
    """``ListOffsets`` at each partition's leader (timestamps, or EARLIEST/LATEST; LATEST is
    the last stable offset at ``read_committed``)."""
    md = access.metadata

    async def one(tp: TopicPartition, ts: int) -> int:
        async def leader() -> str:
            return await md.leader_url(tp.topic, tp.partition, timeout_s=10.0)

        try:
            ans = await call_with_retries(
                md,
                leader,
                "list_offsets",
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "timestamp": ts,
                    "isolation_level": isolation_level,
                },
                budget_s=10.0,
                backoff_s=0.1,
            )
        except ClientError as e:
            raise kafka_error(e.code, e.message) from None
        return int(ans["offset"])

    got = await asyncio.gather(*(one(tp, ts) for tp, ts in wanted.items()))
    return dict(zip(wanted, got, strict=True))


# --------------------------------------------------------------------------- handlers


def _instances(request: web.Request) -> ConsumerInstances:
    return request.app[INSTANCES_KEY]


def _ids(request: web.Request) -> tuple[str, str]:
    return request.match_info["group"], request.match_info["instance"]


async def create_instance(request: web.Request) -> web.Response:
    group = request.match_info["group"]
    body = await json_body(request, required=False)
    if not isinstance(body, dict):
        raise unprocessable("The body must be a JSON object.")
    name = body.get("name", body.get("id"))  # "id" is the REST Proxy's deprecated alias
    if name is None:
        name = f"rest-consumer-{uuid.uuid4()}"
    if not isinstance(name, str) or not _NAME.match(name):
        raise bad_config("'name' must be 1-249 characters of letters, digits, '.', '_' and '-'.")
    fmt = str(body.get("format") or "binary").lower()
    if fmt not in FORMATS:
        raise bad_config(f"'format' must be one of {', '.join(FORMATS)}, got {fmt!r}.")
    reset = str(body.get("auto.offset.reset") or "latest").lower()
    reset = {"smallest": "earliest", "largest": "latest"}.get(reset, reset)
    if reset not in RESETS:
        raise bad_config(f"'auto.offset.reset' must be one of {', '.join(RESETS)}, got {reset!r}.")
    auto_commit = _bool(body.get("auto.commit.enable", True), "auto.commit.enable")
    # Kafka's consumer config name; "isolation_level" is accepted as the v3 parameter's.
    isolation = str(
        body.get("isolation.level") or body.get("isolation_level") or "read_uncommitted"
    ).lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise bad_config(
            f"'isolation.level' must be read_uncommitted or read_committed, got {isolation!r}."
        )
    fetch_min = _int(body.get("fetch.min.bytes", 1), "fetch.min.bytes", 1, 64 << 20)
    req_timeout = _int(
        body.get("consumer.request.timeout.ms", REQUEST_TIMEOUT_MS_DEFAULT),
        "consumer.request.timeout.ms",
        0,
        READ_TIMEOUT_MS_MAX,
    )
    reg = _instances(request)
    reg.create(
        group,
        name,
        fmt=fmt,
        auto_offset_reset=reset,
        auto_commit=auto_commit,
        fetch_min_bytes=fetch_min,
        request_timeout_ms=req_timeout,
        isolation_level=isolation,
    )
    return _response(
        {
            "instance_id": name,
            "base_uri": f"{reg.advertised_url}/consumers/{group}/instances/{name}",
        }
    )


async def delete_instance(request: web.Request) -> web.Response:
    await _instances(request).delete(*_ids(request))
    return _no_content()


async def subscribe(request: web.Request) -> web.Response:
    body = await json_body(request)
    topics = body.get("topics") if isinstance(body, dict) else None
    pattern = body.get("topic_pattern") if isinstance(body, dict) else None
    if (topics is None) == (pattern is None):
        raise unprocessable(
            'The body must be {"topics": [...]} or {"topic_pattern": "regex"}, not both.'
        )
    if topics is not None and (
        not isinstance(topics, list)
        or not topics
        or not all(isinstance(t, str) and t for t in topics)
    ):
        raise unprocessable("'topics' must be a non-empty list of topic names.")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise unprocessable("'topic_pattern' must be a regular expression.")
        try:
            re.compile(pattern)
        except re.error as e:
            raise unprocessable(f"'topic_pattern' is not a regular expression: {e}.") from None
    async with _instances(request).using(*_ids(request)) as inst:
        await inst.subscribe(topics, pattern)
    return _no_content()


async def get_subscription(request: web.Request) -> web.Response:
    async with _instances(request).using(*_ids(request)) as inst:
        return _response({"topics": inst.subscription()})


async def unsubscribe(request: web.Request) -> web.Response:
    async with _instances(request).using(*_ids(request)) as inst:
        await inst.unsubscribe()
    return _no_content()


async def assign(request: web.Request) -> web.Response:
    ctx = ctx_of(request)
    tps = _partitions(await json_body(request))
    for tp in tps:
        ctx.partition_or_404(tp.topic, tp.partition)
    async with _instances(request).using(*_ids(request)) as inst:
        await inst.assign(tps)
    return _no_content()


async def get_assignments(request: web.Request) -> web.Response:
    async with _instances(request).using(*_ids(request)) as inst:
        return _response({"partitions": _tps_json(inst.assignment())})


async def seek(request: web.Request) -> web.Response:
    body = await json_body(request)
    if isinstance(body, dict) and "timestamps" in body:
        times = {
            tp: parse_timestamp(v) for tp, v in _tp_values(body, "timestamps", "timestamp").items()
        }
        async with _instances(request).using(*_ids(request)) as inst:
            await inst.seek_to_times({tp: int(ts) for tp, ts in times.items() if ts is not None})
        return _no_content()
    offsets = {tp: _offset(v) for tp, v in _tp_values(body, "offsets", "offset").items()}
    async with _instances(request).using(*_ids(request)) as inst:
        inst.seek(offsets)
    return _no_content()


async def seek_to_beginning(request: web.Request) -> web.Response:
    tps = _partitions(await json_body(request))
    async with _instances(request).using(*_ids(request)) as inst:
        await inst.seek_to(tps, EARLIEST)
    return _no_content()


async def seek_to_end(request: web.Request) -> web.Response:
    tps = _partitions(await json_body(request))
    async with _instances(request).using(*_ids(request)) as inst:
        await inst.seek_to(tps, LATEST)
    return _no_content()


def _accepted_format(request: web.Request, fmt: str) -> None:
    """``Accept`` must be the instance's format (406/40601 otherwise); none, ``*/*`` or plain
    JSON mean "whatever the instance reads"."""
    for part in request.headers.get("Accept", "").split(","):
        mt = part.split(";")[0].strip().lower()
        if mt in (
            "",
            "*/*",
            "application/*",
            "application/json",
            V2,
            f"application/vnd.kafka.{fmt}.v2+json",
        ):
            return
    raise not_acceptable(
        f"The requested embedded data format does not match the "
        f"deserializer for this consumer instance (it reads {fmt}: "
        f"Accept: application/vnd.kafka.{fmt}.v2+json)."
    )


def _render_schema(
    recs: list[ConsumerRecord], fmt: str, codec: EmbeddedCodec
) -> list[dict[str, Any]]:
    """Records whose keys and values are in the registry's wire format (schemas preloaded)."""

    def dec(v: bytes | None, r: ConsumerRecord, part: str) -> Any:
        if v is None:
            return None
        return codec.decode(v, f"The {part} at offset {r.offset} of {r.topic}-{r.partition}")

    return [
        {
            "topic": r.topic,
            "key": dec(r.key, r, "key"),
            "value": dec(r.value, r, "value"),
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "headers": [
                {"name": n, "value": render_value(v, "binary", r.offset)} for n, v in r.headers
            ],
        }
        for r in recs
    ]


def _render(recs: list[ConsumerRecord], fmt: str) -> list[dict[str, Any]]:
    out = []
    for r in recs:
        key: Any
        try:
            key = render_value(r.key, fmt, r.offset)
        except HttpError:
            # A key produced as a STRING is common beside JSON values: give it as a string
            # rather than refuse the whole answer.
            key = render_value(r.key, "string", r.offset)
        try:
            value = render_value(r.value, fmt, r.offset)
        except HttpError:
            raise HttpError(
                422,
                f"The record at offset {r.offset} of {r.topic}-{r.partition} "
                f"is not JSON; read it with a binary or string consumer "
                f"instance, or seek past it (POST .../positions).",
                42203,
            ) from None
        out.append(
            {
                "topic": r.topic,
                "key": key,
                "value": value,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "headers": [
                    {"name": n, "value": render_value(v, "binary", r.offset)} for n, v in r.headers
                ],
            }
        )
    return out


async def get_records(request: web.Request) -> web.Response:
    reg = _instances(request)
    group, name = _ids(request)
    inst = reg.get(group, name)
    _accepted_format(request, inst.fmt)
    timeout_ms = int_param(
        request, "timeout", inst.request_timeout_ms, lo=0, hi=READ_TIMEOUT_MS_MAX
    )
    max_bytes = int_param(request, "max_bytes", MAX_BYTES_DEFAULT, lo=1)
    async with reg.using(group, name) as inst:
        recs = await inst.records(timeout_ms, max_bytes)
        try:
            if inst.fmt in SCHEMA_FORMATS:
                codec = codec_of(request)
                await codec.preload(v for r in recs for v in (r.key, r.value))
                body = _render_schema(recs, inst.fmt, codec)
            else:
                body = _render(recs, inst.fmt)
        except HttpError:
            inst.rewind(recs)  # nothing of this answer was consumed
            raise
    return _response(body, content_type=f"application/vnd.kafka.{inst.fmt}.v2+json")


async def commit_offsets(request: web.Request) -> web.Response:
    body = await json_body(request, required=False)
    offsets: dict[TopicPartition, int] | None = None
    if isinstance(body, dict) and body.get("offsets"):
        # The body names the last record processed; the commit is the next one to read
        # (Kafka REST's KafkaConsumerState.commitOffsets stores offset + 1).
        offsets = {tp: _offset(v) + 1 for tp, v in _tp_values(body, "offsets", "offset").items()}
    elif body not in ({}, None) and not (isinstance(body, dict) and "offsets" in body):
        raise unprocessable(
            "The body must be empty (commit everything consumed) or "
            '{"offsets": [{"topic", "partition", "offset"}, ...]}.'
        )
    async with _instances(request).using(*_ids(request)) as inst:
        await inst.commit(offsets)
    return _response([])


async def get_offsets(request: web.Request) -> web.Response:
    # The REST Proxy takes a JSON body on this GET; without one, the instance's assignment.
    body = await json_body(request, required=False)
    tps = _partitions(body) if isinstance(body, dict) and "partitions" in body else None
    async with _instances(request).using(*_ids(request)) as inst:
        return _response({"offsets": await inst.committed(tps)})


def add_v2_consumer_routes(
    app: web.Application,
    *,
    bootstrap: list[str],
    advertised_url: str,
    instance_timeout_ms: int = INSTANCE_TIMEOUT_MS_DEFAULT,
) -> ConsumerInstances:
    """Registers the routes; ``api.http.groups.add_group_routes`` must come first (its
    ``GroupAccess`` serves the simple consumers' offsets). Instances are closed (members
    leave their groups) when the app shuts down."""
    reg = ConsumerInstances(
        bootstrap=bootstrap,
        advertised_url=advertised_url,
        access=app[GROUPS_KEY],
        instance_timeout_ms=instance_timeout_ms,
    )
    app[INSTANCES_KEY] = reg
    r = app.router
    i = "/consumers/{group}/instances/{instance}"
    r.add_post("/consumers/{group}", create_instance)
    r.add_delete(i, delete_instance)
    r.add_post(i + "/subscription", subscribe)
    r.add_get(i + "/subscription", get_subscription)
    r.add_delete(i + "/subscription", unsubscribe)
    r.add_post(i + "/assignments", assign)
    r.add_get(i + "/assignments", get_assignments)
    r.add_post(i + "/positions", seek)
    r.add_post(i + "/positions/beginning", seek_to_beginning)
    r.add_post(i + "/positions/end", seek_to_end)
    r.add_get(i + "/records", get_records)
    r.add_post(i + "/offsets", commit_offsets)
    r.add_get(i + "/offsets", get_offsets)

    async def close(app: web.Application) -> None:
        # on_shutdown runs before on_cleanup: the brokers (this one included) still answer
        # the members' leave requests.
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S + 5):
                await reg.close()
        except TimeoutError:
            log.warning("consumer instances not all closed within %.0f s", CLOSE_TIMEOUT_S + 5)

    app.on_shutdown.append(close)
    return reg
