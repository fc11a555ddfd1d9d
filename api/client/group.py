"""``AsyncGroupConsumer``: Kafka's subscribing consumer, sharing partitions with its group.

What it owns: one member of one group, as Kafka's ``KafkaConsumer`` with ``subscribe``. The
group's coordinator (docs/consumer-groups.md) computes who reads what; this client follows
its answers. Fetching is ``AsyncConsumer``'s (composed: the group consumer changes its
assignment and positions, and ``poll`` is its ``poll``). Coordinator calls go through
``api.client.coordinator.CoordinatorClient``, which finds the coordinator and follows it.

Tasks
-----
Kafka's consumer drives the rebalance from inside ``poll`` and heartbeats from a thread; here
three background tasks do the work, so an application that is busy between polls still
rebalances promptly:

* the *member* task finds the coordinator, joins (``join``: topics, protocol, assignor,
  ``owned``), syncs (``sync``: the plan), revokes and assigns partitions, and rejoins when told;
* the *heartbeat* task heartbeats every ``heartbeat_interval_ms`` while the member is in a
  generation, and leaves the group when the application has not called ``poll`` for
  ``max_poll_interval_ms`` (what Java's heartbeat thread does, KIP-62);
* the *auto-commit* task commits every ``auto_commit_interval_ms`` (``enable_auto_commit``);
* with a pattern subscription, a fourth refreshes the topic list every
  ``metadata_max_age_ms`` and rejoins when the matching topics change.

Member states and transitions
-----------------------------
==========  ======================================================  ==========
phase       event                                                   next phase
==========  ======================================================  ==========
UNJOINED    a subscription (or a poll after the poll timeout)       JOINING
JOINING     sync answered NONE                                      STABLE
JOINING     join/sync answered UNKNOWN_MEMBER_ID/ILLEGAL_GENERATION UNJOINED (lost)
JOINING     commit answered ILLEGAL_GENERATION                      JOINING (the join decides)
JOINING     commit answered UNKNOWN_MEMBER_ID                       UNJOINED (lost)
STABLE      heartbeat REBALANCE_IN_PROGRESS, sync's ``rejoin``,     JOINING
            a subscription change
STABLE      heartbeat/commit UNKNOWN_MEMBER_ID/ILLEGAL_GENERATION   UNJOINED (lost)
STABLE      no poll for ``max_poll_interval_ms``                    UNJOINED (left)
any         unsubscribe, close                                      UNJOINED (left)
==========  ======================================================  ==========

Giving partitions up:

* EAGER (``range``, ``roundrobin``, ``sticky``): before every rejoin, commit (auto-commit),
  revoke everything (``on_revoked``), join with nothing.
* COOPERATIVE (``cooperative-sticky``, KIP-429): keep everything across the join (``owned``
  is sent); after sync, revoke only what the plan took away (paused at once, committed,
  ``on_revoked``, dropped), add what it gave (``on_assigned``, even when empty, as KIP-429's
  clients do) and rejoin if the coordinator says so, which hands the revoked partitions on.
* Fenced (UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION): the partitions may already belong to
  someone else: they are dropped at once, never committed, and reported lost (``on_lost``,
  by default ``on_revoked``, as Kafka's ``onPartitionsLost``).

Commits and delivery
--------------------
Auto-commit is at-least-once: it commits the positions as they were when ``poll`` was last
called, i.e. after the records every *earlier* poll returned, which the application has
finished with by the time it polls again (Kafka commits inside ``poll`` for this reason).
Records the latest poll returned are committed by the next poll's snapshot, ``commit()``,
``unsubscribe`` or ``close``. A rebalance that runs while the application works on a batch
(the tasks run in the background) therefore gives that batch's partitions to the next owner
uncommitted: it reads them again. Duplicates, never loss.

``poll`` never returns records of a partition that is no longer assigned: revocation and loss
take the partition out of the fetcher synchronously, between two polls' records.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import Any

from api.client.consumer import AsyncConsumer
from api.client.coordinator import CoordinatorClient
from api.client.errors import ClientError, CommitFailedError
from api.client.security import ClientSecurity
from api.client.types import ConsumerGroupMetadata, ConsumerRecord, TopicPartition
from common.waits import wait_event

log = logging.getLogger(__name__)

PROTOCOLS = {
    "range": "eager",
    "roundrobin": "eager",
    "sticky": "eager",
    "cooperative-sticky": "cooperative",
}
"""``partition_assignment_strategy`` -> the rebalance protocol the member speaks."""

FENCED = frozenset({"UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"})

FATAL_JOIN_ERRORS = frozenset(
    {
        "INCONSISTENT_GROUP_PROTOCOL",
        "INVALID_SESSION_TIMEOUT",
        "UNSUPPORTED_ASSIGNOR",
        "INVALID_GROUP_ID",
        "GROUP_MAX_SIZE_REACHED",
    }
)
"""Join refusals that retrying will not cure: raised from the next ``poll`` (Kafka raises
them from ``poll`` too); the member keeps retrying with a backoff in case the group changes."""

RETRY_BACKOFF_S_MAX = 5.0
LEAVE_TIMEOUT_S = 5.0

PartitionsCallback = Callable[[set[TopicPartition]], Any]
CommitCallback = Callable[[dict[TopicPartition, int], Exception | None], Any]


class _Phase(Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    STABLE = "stable"


def _tps(pairs: Iterable[Sequence[Any]] | None) -> set[TopicPartition]:
    return {TopicPartition(str(p[0]), int(p[1])) for p in pairs or ()}


class AsyncGroupConsumer:
    """A member of consumer group ``group_id``; see the module docstring and docs/client.md."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        group_id: str,
        client_id: str = "longboat",
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300000,
        partition_assignment_strategy: str = "range",
        fetch_max_bytes: int = 1 << 20,
        fetch_min_bytes: int = 1,
        max_wait_ms: int = 500,
        max_poll_records: int | None = None,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        exclude_internal_topics: bool = True,
        check_crcs: bool = True,
        source_host: str | None = None,
        isolation_level: str = "read_uncommitted",
        security: ClientSecurity | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must be a non-empty string")
        if partition_assignment_strategy not in PROTOCOLS:
            raise ValueError(f"partition_assignment_strategy must be one of {sorted(PROTOCOLS)}")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.group_id = group_id
        self.client_id = client_id
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_ms = max_poll_interval_ms
        self.assignor = partition_assignment_strategy
        self.protocol = PROTOCOLS[partition_assignment_strategy]
        self.request_timeout_s = request_timeout_ms / 1000
        self._isolation_level = isolation_level
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        self.exclude_internal_topics = exclude_internal_topics
        self._fetcher = AsyncConsumer(
            bootstrap,
            fetch_max_bytes=fetch_max_bytes,
            fetch_min_bytes=fetch_min_bytes,
            max_wait_ms=max_wait_ms,
            auto_offset_reset=auto_offset_reset,
            max_poll_records=max_poll_records,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            check_crcs=check_crcs,
            source_host=source_host,
            isolation_level=isolation_level,
            security=security,
        )
        self._coordinator = CoordinatorClient(
            self._fetcher.transport,
            self._fetcher.metadata,
            group_id,
            retry_timeout_s=self.request_timeout_s,
        )
        # Subscription.
        self._topics: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None
        self._matched: frozenset[str] = frozenset()
        self._on_revoked: PartitionsCallback | None = None
        self._on_assigned: PartitionsCallback | None = None
        self._on_lost: PartitionsCallback | None = None
        # Membership. Invariant: _phase is STABLE only with a member id and a generation.
        self._member_id = ""
        self._generation = -1
        self._phase = _Phase.UNJOINED
        self._rejoin_needed = False
        self._pending_lost: set[TopicPartition] = set()
        self._pending_leave: dict[TopicPartition, int] | None = None
        """Set by ``unsubscribe``: the positions to commit before leaving."""
        self._revoked_at_leave: set[TopicPartition] = set()
        """Set by ``unsubscribe``: the partitions ``on_revoked`` is still to hear about."""
        self._pending_errors: list[BaseException] = []
        # Commits.
        self._consumed: dict[TopicPartition, int] = {}
        """Positions when ``poll`` was last entered: what the application is done with."""
        self._last_committed: dict[TopicPartition, int] = {}
        # When each assigned partition was (last) added, as a count: a commit retried under a
        # later generation must not land on a partition that was revoked and added back
        # meanwhile, since adding it seeked to the offset committed then (see _commit).
        self._owned_since: dict[TopicPartition, int] = {}
        self._ownership_changes = 0
        # Polls (KIP-62).
        self._in_poll = 0
        self._last_poll = time.monotonic()
        self._poll_expired = False
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._closing = False
        self._closed = False

    # ------------------------------------------------------------------ life cycle

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self._fetcher.start()
        loop = asyncio.get_running_loop()
        self._last_poll = time.monotonic()
        self._tasks = [
            loop.create_task(self._member_loop(), name=f"group-{self.group_id}-member"),
            loop.create_task(self._heartbeat_loop(), name=f"group-{self.group_id}-heartbeat"),
            loop.create_task(self._auto_commit_loop(), name=f"group-{self.group_id}-commit"),
            loop.create_task(self._pattern_loop(), name=f"group-{self.group_id}-pattern"),
        ]

    async def __aenter__(self) -> AsyncGroupConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit (auto-commit: the positions of everything ``poll`` returned), revoke the
        assignment (``on_revoked``), leave the group and close the connections."""
        if self._closed:
            return
        self._closed = self._closing = True
        self._wake.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        try:
            await self._finish_pending_leave()
            if self.enable_auto_commit:
                await self._commit_quietly(self._fetcher.positions(), "on close")
            await self._deliver_lost()  # a commit that found the member fenced loses all
            owned = self._fetcher.assignment()
            if owned:
                self._fetcher.pause(*owned)
                await self._call_back(self._on_revoked, owned)
            self._fetcher.assign([])
            await self._leave_quietly("the consumer is closing")
        finally:
            await self._fetcher.close()

    # ------------------------------------------------------------------ subscription

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        on_revoked: PartitionsCallback | None = None,
        on_assigned: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
    ) -> None:
        """Subscribe to ``topics``, or to every topic whose whole name matches ``pattern``
        (a Python regular expression; the topic list is refreshed every
        ``metadata_max_age_ms``). Replaces an earlier subscription. Callbacks take the set of
        partitions and may be plain functions or coroutines; ``on_lost`` (partitions taken
        away without a chance to commit) defaults to ``on_revoked``."""
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe to topics or to a pattern (one of them)")
        if isinstance(topics, str):
            topics = [topics]
        new_topics = frozenset(topics or ())
        new_pattern = None if pattern is None else re.compile(pattern)
        if new_pattern is None and not new_topics:
            self.unsubscribe()  # Kafka: subscribing to nothing is unsubscribing
            return
        if any(not t for t in new_topics):
            raise ValueError("topic names must be non-empty")
        changed = (
            new_topics != self._topics
            or (new_pattern is None) != (self._pattern is None)
            or (
                new_pattern is not None
                and self._pattern is not None
                and new_pattern.pattern != self._pattern.pattern
            )
        )
        self._topics, self._pattern = new_topics, new_pattern
        self._on_revoked, self._on_assigned, self._on_lost = on_revoked, on_assigned, on_lost
        if changed and self._phase != _Phase.UNJOINED:
            self._rejoin_needed = True
        self._wake.set()

    def unsubscribe(self) -> None:
        """Give up every partition and leave the group. The positions of everything ``poll``
        returned are committed first (auto-commit) and ``on_revoked`` is called, in the
        background; ``poll`` stops returning records at once."""
        owned = self._fetcher.assignment()
        positions = self._fetcher.positions()
        if self._member_id or owned:
            pending = self._pending_leave or {}
            pending.update(positions)
            self._pending_leave = pending
            self._revoked_at_leave |= owned
        self._fetcher.assign([])
        self._topics, self._pattern, self._matched = frozenset(), None, frozenset()
        self._wake.set()

    def subscription(self) -> set[str]:
        """The subscribed topics (for a pattern: the topics it matched at the last join)."""
        return set(self._matched if self._pattern is not None else self._topics)

    def assignment(self) -> set[TopicPartition]:
        return self._fetcher.assignment()

    @property
    def member_id(self) -> str:
        """The id the coordinator gave this member ("" until the first join completes)."""
        return self._member_id

    @property
    def generation(self) -> int:
        """The group generation this member last joined (-1 when not in one)."""
        return self._generation

    # ------------------------------------------------------------------ consuming

    async def poll(
        self, timeout_ms: int = 1000, max_records: int | None = None
    ) -> list[ConsumerRecord]:
        """Records of the assigned partitions (at most ``max_records``), in offset order per
        partition; ``[]`` if none arrived within ``timeout_ms``. Raises what a rebalance
        callback raised, a join the coordinator refuses for good, and the fetcher's errors."""
        if self._closing:
            raise ClientError("ILLEGAL_STATE", "the consumer is closed")
        if not self._started:
            raise ClientError("ILLEGAL_STATE", "start() the consumer (or use async with)")
        if not self._topics and self._pattern is None:
            raise ClientError("ILLEGAL_STATE", "the consumer is not subscribed to any topic")
        if self._pending_errors:
            raise self._pending_errors.pop(0)
        # Everything returned by earlier polls is done with: auto-commit may commit it.
        self._consumed.update(self._fetcher.positions())
        self._in_poll += 1
        self._last_poll = time.monotonic()
        if self._poll_expired:
            self._poll_expired = False  # Java rejoins on the poll after a poll timeout
            self._wake.set()
        try:
            return await self._fetcher.poll(timeout_ms, max_records)
        finally:
            self._in_poll -= 1
            self._last_poll = time.monotonic()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._fetcher.seek(TopicPartition(*tp), offset)

    async def position(self, tp: TopicPartition) -> int:
        return await self._fetcher.position(TopicPartition(*tp))

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        await self._fetcher.seek_to_beginning(*tps)

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        await self._fetcher.seek_to_end(*tps)

    def pause(self, *tps: TopicPartition) -> None:
        self._fetcher.pause(*tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._fetcher.resume(*tps)

    def paused(self) -> set[TopicPartition]:
        return self._fetcher.paused()

    async def topics(self) -> list[str]:
        return await self._fetcher.topics()

    async def partitions_for(self, topic: str) -> list[int]:
        return await self._fetcher.partitions_for(topic)

    async def beginning_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._fetcher.beginning_offsets(tps)

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await self._fetcher.end_offsets(tps)

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._fetcher.high_watermark(tp)

    def last_stable_offset(self, tp: TopicPartition) -> int:
        return self._fetcher.last_stable_offset(tp)

    def lag(self, tp: TopicPartition) -> int | None:
        return self._fetcher.lag(tp)

    # ------------------------------------------------------------------ commits

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (the offset of the next record to read, per partition), or the
        positions of everything ``poll`` returned. Raises ``CommitFailedError`` when the
        group has moved on without this member (its partitions may be someone else's)."""
        if offsets is None:
            offsets = self._fetcher.positions()
        else:
            offsets = {TopicPartition(*tp): int(o) for tp, o in offsets.items()}
        if offsets:
            await self._commit(offsets, wait_for_rebalance=True)

    def commit_async(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        callback: CommitCallback | None = None,
    ) -> asyncio.Task[None]:
        """``commit`` in a task. With a ``callback`` (called with the offsets and the error
        or ``None``; may be a coroutine) the task does not raise; without one, await it."""
        snapshot = (
            self._fetcher.positions()
            if offsets is None
            else {TopicPartition(*tp): int(o) for tp, o in offsets.items()}
        )

        async def go() -> None:
            error: Exception | None = None
            try:
                await self.commit(snapshot)
            except Exception as e:
                if callback is None:
                    raise
                error = e
            if callback is not None:
                r = callback(snapshot, error)
                if inspect.isawaitable(r):
                    await r

        task = asyncio.get_running_loop().create_task(go(), name=f"group-{self.group_id}-commit")
        if callback is None:
            # Nobody may await it: log the failure rather than "exception never retrieved".
            task.add_done_callback(_log_task_error)
        return task

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group, member id and generation now, for a transactional producer's
        ``send_offsets_to_transaction`` (Kafka's ``groupMetadata()``)."""
        return ConsumerGroupMetadata(self.group_id, self._member_id or "", self._generation)

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (``None``: none committed)."""
        wanted = [TopicPartition(*tp) for tp in tps]
        if not wanted:
            return {}
        body: dict[str, Any] = {"partitions": [[tp.topic, tp.partition] for tp in wanted]}
        if self._isolation_level == "read_committed":
            # KIP-447: not while a transaction holds offsets of these partitions; a
            # transactional processor taking over must start where the last one committed.
            body["require_stable"] = True
        deadline = time.monotonic() + self.request_timeout_s
        attempt = 0
        while True:
            try:
                ans = await self._coordinator.call(
                    "fetch_offsets", body, timeout_s=self.request_timeout_s
                )
            except ClientError as e:
                if e.code != "UNSTABLE_OFFSET_COMMIT" or time.monotonic() >= deadline:
                    raise
                attempt += 1
                await asyncio.sleep(min(0.02 * 2**attempt, 0.5))
                continue
            break
        err = ans.get("error")
        if err not in (None, "NONE"):
            raise ClientError(str(err), f"fetch_offsets of group {self.group_id!r}")
        got = {TopicPartition(str(o[0]), int(o[1])): int(o[2]) for o in ans.get("offsets") or ()}
        return {tp: got.get(tp) for tp in wanted}

    async def _commit(
        self, offsets: dict[TopicPartition, int], *, wait_for_rebalance: bool
    ) -> None:
        """One commit under the current generation. REBALANCE_IN_PROGRESS (the group is
        handing out plans: Kafka refuses commits then) and a generation that moved on while
        the partitions stayed ours are retried within the request timeout; a generation this
        member was fenced from raises ``CommitFailedError`` and rejoins."""
        deadline = time.monotonic() + self.request_timeout_s
        attempt = 0
        body_offsets = [[tp.topic, tp.partition, off, ""] for tp, off in sorted(offsets.items())]
        owned_since = {tp: self._owned_since.get(tp) for tp in offsets}
        while True:
            gen, mid = self._generation, self._member_id
            if not mid or gen < 0:
                raise CommitFailedError(
                    "UNKNOWN_MEMBER_ID",
                    f"not a member of group {self.group_id!r} (not joined "
                    "yet, or fenced and rejoining)",
                )
            ans = await self._coordinator.call(
                "commit",
                {"member_id": mid, "generation": gen, "offsets": body_offsets},
                timeout_s=self.request_timeout_s,
            )
            err = str(ans.get("error") or "NONE")
            if err == "NONE":
                refused = _refused_partitions(ans)
                self._last_committed.update(
                    (tp, o) for tp, o in offsets.items() if tp not in refused
                )
                if refused:
                    # Kafka's OffsetCommit answers a topic the principal may not READ per
                    # partition and commits the others (issue 18).
                    code = next(iter(refused.values()))
                    raise ClientError(
                        code,
                        f"group {self.group_id!r}: offsets of {sorted(refused)} not committed "
                        "(the others were)",
                    )
                return
            moved_on = (gen, mid) != (self._generation, self._member_id)
            if err in FENCED and not moved_on:
                if err == "ILLEGAL_GENERATION" and self._phase == _Phase.JOINING:
                    # The group completed the join this member has in flight before this
                    # commit (sent in the old generation, on another connection) arrived.
                    # The member is still in (else UNKNOWN_MEMBER_ID) and the join's answer
                    # brings the new generation, in which a cooperative member keeps what it
                    # owns: fencing here would report partitions it keeps as lost. Kafka's
                    # consumer is never caught like this: it sends commits and joins in order
                    # on one connection, and refuses commits locally while it rebalances.
                    log.info(
                        "group %s: commit of generation %d crossed this member's join: "
                        "refused, not fenced",
                        self.group_id,
                        gen,
                    )
                    raise CommitFailedError(
                        "REBALANCE_IN_PROGRESS",
                        f"group {self.group_id!r}: generation {gen} ended "
                        "while this member rejoined; commit again after "
                        "the join",
                    )
                self._fence(err)
                raise CommitFailedError(
                    err,
                    f"group {self.group_id!r} generation {gen}: the "
                    "group rebalanced without this member",
                )
            # Waiting out REBALANCE_IN_PROGRESS makes sense only once this member has synced:
            # before that the group waits for *us* (a close in the middle of a join, say).
            retry = err in FENCED or (
                err == "REBALANCE_IN_PROGRESS"
                and wait_for_rebalance
                and self._phase == _Phase.STABLE
            )
            # Retried under a later generation only for partitions owned throughout: one
            # revoked and added back meanwhile was seeked to the offset committed when it
            # came back, and these offsets landing after that would move the group's
            # committed offset back once this member commits again from there (a jepsen_tests
            # run with eager members and a coordinator kill saw 921, then 857).
            if (
                retry
                and offsets.keys() <= self._fetcher.assignment()
                and all(self._owned_since.get(tp) == since for tp, since in owned_since.items())
                and time.monotonic() < deadline
            ):
                attempt += 1
                await asyncio.sleep(min(self.retry_backoff_s * attempt, 0.5))
                continue
            if err in FENCED or err == "REBALANCE_IN_PROGRESS":
                raise CommitFailedError(err, f"group {self.group_id!r} generation {gen}")
            raise ClientError(err, f"commit to group {self.group_id!r}: {ans.get('message') or ''}")

    async def _commit_quietly(
        self, offsets: dict[TopicPartition, int], why: str, *, wait_for_rebalance: bool = True
    ) -> None:
        if not offsets or not self._member_id or self._generation < 0:
            return
        try:
            await self._commit(offsets, wait_for_rebalance=wait_for_rebalance)
        except ClientError as e:
            # Refused while the group hands out plans: the commit before the rejoin (or
            # the next interval's) carries these offsets; no reason to alarm anyone.
            level = logging.DEBUG if e.code == "REBALANCE_IN_PROGRESS" else logging.WARNING
            log.log(level, "group %s: auto-commit %s failed: %s", self.group_id, why, e)

    # ------------------------------------------------------------------ the member task

    def _wants_membership(self) -> bool:
        return (
            not self._closing
            and not self._poll_expired
            and (bool(self._topics) or self._pattern is not None)
        )

    async def _member_loop(self) -> None:
        failures = 0
        while not self._closing:
            self._wake.clear()
            try:
                await self._finish_pending_leave()
                await self._deliver_lost()
                if not self._wants_membership():
                    if self._member_id and not self._poll_expired:
                        await self._leave_quietly("unsubscribed")
                    await self._wake.wait()
                    continue
                if self._phase != _Phase.STABLE or self._rejoin_needed:
                    await self._join_and_sync()
                    failures = 0
                    continue
                await self._wake.wait()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                failures += 1
                self._rejoin_needed = True
                if not isinstance(e, ClientError):
                    log.exception("group %s: member task failed", self.group_id)
                    self._pending_errors.append(e)
                else:
                    log.warning("group %s: %s (retrying)", self.group_id, e)
                backoff = min(self.retry_backoff_s * 2 ** min(failures, 10), RETRY_BACKOFF_S_MAX)
                await wait_event(self._wake, backoff)

    async def _join_topics(self) -> frozenset[str]:
        if self._pattern is None:
            return self._topics
        with contextlib.suppress(ClientError):
            await self._fetcher.metadata.refresh()
        self._matched = self._match(self._pattern)
        return self._matched

    def _match(self, pattern: re.Pattern[str]) -> frozenset[str]:
        return frozenset(
            t
            for t in self._fetcher.metadata.current.topics
            if pattern.fullmatch(t) and not (self.exclude_internal_topics and t.startswith("__"))
        )

    async def _join_and_sync(self) -> None:
        cooperative = self.protocol == "cooperative"
        topics = await self._join_topics()
        owned = self._fetcher.assignment()
        if self._phase == _Phase.STABLE and self.enable_auto_commit:
            # Kafka's onJoinPrepare: commit before the rebalance moves anything away.
            await self._commit_quietly(
                self._consumed_of(owned), "before rejoining", wait_for_rebalance=False
            )
        # EAGER gives up everything before joining; COOPERATIVE only what it no longer
        # subscribes to (Kafka's onJoinPrepare does the same).
        await self._revoke(
            owned if not cooperative else {tp for tp in owned if tp.topic not in topics},
            commit=False,
        )
        self._phase = _Phase.JOINING
        self._rejoin_needed = False
        owned = self._fetcher.assignment()
        body: dict[str, Any] = {
            "member_id": self._member_id,
            "topics": sorted(topics),
            "protocol": self.protocol,
            "assignor": self.assignor,
            "client_id": self.client_id,
            "session_timeout_ms": self.session_timeout_ms,
            # KIP-62: how long the group waits for this member to rejoin.
            "rebalance_timeout_ms": self.max_poll_interval_ms,
            "owned": [[tp.topic, tp.partition] for tp in sorted(owned)] if cooperative else None,
        }
        # The join long-polls until the whole group has joined: up to the rebalance timeout.
        join = await self._coordinator.call(
            "join", body, timeout_s=self.max_poll_interval_ms / 1000 + self.request_timeout_s
        )
        err = str(join.get("error") or "NONE")
        if err != "NONE":
            if err in FENCED:
                self._fence(err)
                return
            e = ClientError(err, f"join of group {self.group_id!r} refused")
            if err in FATAL_JOIN_ERRORS:
                self._pending_errors.append(e)
            raise e
        self._member_id = str(join["member_id"])
        self._generation = gen = int(join["generation"])
        log.debug("group %s: joined generation %d as %s", self.group_id, gen, self._member_id)
        sync = await self._coordinator.call(
            "sync",
            {"member_id": self._member_id, "generation": gen},
            timeout_s=self.request_timeout_s,
        )
        err = str(sync.get("error") or "NONE")
        if err == "REBALANCE_IN_PROGRESS":
            self._rejoin_needed = True
            return
        if err in FENCED:
            self._fence(err)
            return
        if err != "NONE":
            raise ClientError(err, f"sync of group {self.group_id!r} refused")
        if self._generation != gen or not self._wants_membership():
            return  # fenced by a heartbeat or commit, or unsubscribed, meanwhile
        # Partitions lost while this join was in flight (a commit or heartbeat of the
        # previous generation was fenced) are reported before this generation's plan: the
        # plan may hand them straight back, and an application told "lost" after "assigned"
        # would drop partitions it owns (the real-process group test saw a member's
        # partitions counted as nobody's after lost 3,5 followed assigned 3,5).
        await self._deliver_lost()
        if self._generation != gen or not self._wants_membership():
            return
        self._phase = _Phase.STABLE  # heartbeats resume while the callbacks below run
        plan = _tps(sync.get("assignment"))
        revoked = (self._fetcher.assignment() - plan) | (
            _tps(sync.get("revoked")) & self._fetcher.assignment()
        )
        await self._revoke(revoked, commit=self.enable_auto_commit)
        added = plan - self._fetcher.assignment()
        committed = await self.committed(added) if added else {}
        if self._generation != gen or not self._wants_membership():
            return
        self._fetcher.assign(self._fetcher.assignment() | added)
        for tp in added:
            self._ownership_changes += 1
            self._owned_since[tp] = self._ownership_changes
        for tp, off in committed.items():
            if off is not None:
                self._fetcher.seek(tp, off)
                self._last_committed[tp] = off
        if sync.get("rejoin"):
            self._rejoin_needed = True  # KIP-429: the revoked partitions move on next round
        log.info(
            "group %s: generation %d, assigned %s",
            self.group_id,
            gen,
            ", ".join(map(str, sorted(self._fetcher.assignment()))) or "nothing",
        )
        await self._call_back(self._on_assigned, added)

    async def _revoke(self, tps: set[TopicPartition], *, commit: bool) -> None:
        """Give partitions up: no more records from them, commit (if asked), ``on_revoked``
        while they are still assigned (so the callback can commit them), then drop them."""
        tps = tps & self._fetcher.assignment()
        if not tps:
            return
        self._fetcher.pause(*tps)
        if commit:
            await self._commit_quietly(self._consumed_of(tps), "of revoked partitions")
        await self._call_back(self._on_revoked, tps)
        self._fetcher.assign(self._fetcher.assignment() - tps)
        for tp in tps:
            self._consumed.pop(tp, None)

    def _fence(self, code: str) -> None:
        """The coordinator no longer counts this member in (UNKNOWN_MEMBER_ID) or in this
        generation (ILLEGAL_GENERATION): whatever it holds may be someone else's by now."""
        log.info(
            "group %s: %s in generation %d: partitions lost, rejoining",
            self.group_id,
            code,
            self._generation,
        )
        if code == "UNKNOWN_MEMBER_ID":
            self._member_id = ""
        self._generation = -1
        self._phase = _Phase.UNJOINED
        self._lose_all()
        self._rejoin_needed = True
        self._wake.set()

    def _lose_all(self) -> None:
        lost = self._fetcher.assignment()
        self._fetcher.assign([])
        self._pending_lost |= lost
        for tp in lost:
            self._consumed.pop(tp, None)

    async def _deliver_lost(self) -> None:
        if self._pending_lost:
            lost, self._pending_lost = self._pending_lost, set()
            await self._call_back(self._on_lost or self._on_revoked, lost)

    async def _finish_pending_leave(self) -> None:
        """What ``unsubscribe`` could not do synchronously: commit and ``on_revoked``."""
        if self._pending_leave is None:
            return
        offsets, self._pending_leave = self._pending_leave, None
        revoked, self._revoked_at_leave = self._revoked_at_leave, set()
        if self.enable_auto_commit:
            await self._commit_quietly(offsets, "on unsubscribe", wait_for_rebalance=True)
        if revoked:
            await self._call_back(self._on_revoked, revoked)
        for tp in revoked:
            self._consumed.pop(tp, None)

    async def _leave_quietly(self, why: str) -> None:
        mid = self._member_id
        self._member_id = ""
        self._generation = -1
        self._phase = _Phase.UNJOINED
        self._rejoin_needed = False
        if not mid:
            return
        log.info("group %s: %s leaves (%s)", self.group_id, mid, why)
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT_S):
                await self._coordinator.call("leave", {"member_id": mid})
        except (ClientError, TimeoutError) as e:
            # The coordinator drops the member after its session timeout anyway.
            log.info("group %s: leave failed (%s)", self.group_id, e)

    async def _call_back(self, cb: PartitionsCallback | None, tps: set[TopicPartition]) -> None:
        if cb is None:
            return
        try:
            r = cb(set(tps))
            if inspect.isawaitable(r):
                await r
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # Kafka propagates a listener's exception to poll; the rebalance goes on.
            log.exception("group %s: rebalance callback failed", self.group_id)
            self._pending_errors.append(e)

    def _consumed_of(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {
            tp: self._consumed[tp]
            for tp in tps
            if tp in self._consumed and self._last_committed.get(tp) != self._consumed[tp]
        }

    # ------------------------------------------------------------------ background timers

    async def _heartbeat_loop(self) -> None:
        while not self._closing:
            wait = self.heartbeat_interval_s
            if self._in_poll == 0 and self._phase == _Phase.STABLE:
                poll_due = self._last_poll + self.max_poll_interval_ms / 1000 - time.monotonic()
                wait = max(0.0, min(wait, poll_due))
            await asyncio.sleep(wait)
            if self._phase != _Phase.STABLE:
                continue
            if self._poll_timed_out():
                # KIP-62: the application is stuck (or gone): let the group go on without
                # it; the next poll rejoins. Nothing is committed: the records it holds were
                # not seen through.
                log.warning(
                    "group %s: no poll for %d ms (max_poll_interval_ms): leaving the "
                    "group; the next poll rejoins",
                    self.group_id,
                    self.max_poll_interval_ms,
                )
                self._poll_expired = True
                self._lose_all()
                # The member task reports the loss now, not after the leave's round trip
                # (up to LEAVE_TIMEOUT_S with the coordinator unreachable).
                self._wake.set()
                await self._leave_quietly("poll timeout")
                continue
            gen, mid = self._generation, self._member_id
            try:
                ans = await self._coordinator.call(
                    "heartbeat",
                    {"member_id": mid, "generation": gen},
                    timeout_s=max(self.heartbeat_interval_s, 1.0),
                )
            except ClientError as e:
                log.debug("group %s: heartbeat failed: %s", self.group_id, e)
                continue
            if (gen, mid) != (self._generation, self._member_id) or self._phase != _Phase.STABLE:
                continue  # answered for a generation we have left since
            err = str(ans.get("error") or "NONE")
            if err == "REBALANCE_IN_PROGRESS":
                if not self._rejoin_needed:
                    self._rejoin_needed = True
                    self._wake.set()
            elif err in FENCED:
                self._fence(err)
            elif err != "NONE":
                log.warning("group %s: heartbeat answered %s", self.group_id, err)

    def _poll_timed_out(self) -> bool:
        return (
            self._in_poll == 0
            and bool(self._member_id)
            and time.monotonic() - self._last_poll > self.max_poll_interval_ms / 1000
        )

    async def _auto_commit_loop(self) -> None:
        if not self.enable_auto_commit:
            return
        while not self._closing:
            await asyncio.sleep(self.auto_commit_interval_s)
            if self._phase == _Phase.STABLE:
                assigned = self._fetcher.assignment() - self._fetcher.paused()
                # Not waiting out a rebalance: the rejoin commits anyway.
                await self._commit_quietly(
                    self._consumed_of(assigned), "", wait_for_rebalance=False
                )

    async def _pattern_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.metadata_max_age_s)
            pattern = self._pattern
            if pattern is None or self._phase != _Phase.STABLE:
                continue
            try:
                await self._fetcher.metadata.refresh()
            except ClientError as e:
                log.debug("group %s: metadata refresh failed: %s", self.group_id, e)
                continue
            if self._match(pattern) != self._matched and not self._rejoin_needed:
                log.info(
                    "group %s: topics matching %r changed: rejoining",
                    self.group_id,
                    pattern.pattern,
                )
                self._rejoin_needed = True
                self._wake.set()


def _log_task_error(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("commit_async failed: %s", task.exception())


def _refused_partitions(ans: dict[str, Any]) -> dict[TopicPartition, str]:
    """A commit answer's ``partition_errors`` (``[topic, partition, error]``: the partitions
    the coordinator did not commit, e.g. TOPIC_AUTHORIZATION_FAILED) by partition."""
    return {
        TopicPartition(str(e[0]), int(e[1])): str(e[2]) for e in ans.get("partition_errors") or ()
    }
