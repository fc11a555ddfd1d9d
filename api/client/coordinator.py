"""Talking to a group's coordinator: find it, send it ``group/<op>``, follow it when it moves.

The wire protocol is docs/consumer-groups.md, "The coordinator on a broker: wire protocol":
``POST /binary/v1/group/<op>``, msgpack map in and out. Two kinds of ``error`` come
back and they mean different things:

* a refusal of the whole request (``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``,
  ``COORDINATOR_LOAD_IN_PROGRESS``, or a lost connection): the request never reached the
  group. ``CoordinatorClient.call`` forgets the coordinator, finds it again and retries, as
  Kafka's ``AbstractCoordinator`` marks the coordinator unknown and looks it up again;
* a group-level outcome (``NONE``, ``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``,
  ``REBALANCE_IN_PROGRESS``, ...): the group answered. It is returned in the answer map, for
  the caller's state machine to act on (rejoin, give up partitions, ...).

Anything else (a malformed request, a server bug) raises ``ClientError``.

This module holds no group state: the consumer (``api.client.group``), the HTTP consumer
instances and ``longboat groups`` all drive their groups through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from api.client.errors import ClientError
from api.client.transport import MetadataCache, Transport

log = logging.getLogger(__name__)
GROUP_ROUTE = "group"

COORDINATOR_ERRORS = frozenset(
    {
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
    }
)
"""Refusals after which the coordinator is looked up again and the request retried."""

CONNECTION_ERRORS = frozenset({"NETWORK_EXCEPTION", "REQUEST_TIMED_OUT"})
"""The coordinator could not be reached (or did not answer in time): it may have died, so it
is looked up again too."""

GROUP_ERRORS = frozenset(
    {
        "NONE",
        "UNKNOWN_MEMBER_ID",
        "ILLEGAL_GENERATION",
        "REBALANCE_IN_PROGRESS",
        "INCONSISTENT_GROUP_PROTOCOL",
        "INVALID_SESSION_TIMEOUT",
        "GROUP_MAX_SIZE_REACHED",
        "NON_EMPTY_GROUP",
        "GROUP_ID_NOT_FOUND",
        "INVALID_GROUP_ID",
        "UNSUPPORTED_ASSIGNOR",
        "GROUP_SUBSCRIBED_TO_TOPIC",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "OFFSET_METADATA_TOO_LARGE",
        "INVALID_COMMIT_OFFSET_SIZE",
    }
)
"""Outcomes the group itself answered (``broker.groups.types.ErrorCode`` and the commit
refusals Kafka's OffsetCommit has): returned to the caller, never raised."""

BACKOFF_S_MIN = 0.05
BACKOFF_S_MAX = 1.0


def _error_of(answer: dict[str, Any]) -> str | None:
    err = answer.get("error")
    return None if err is None else str(err)


class CoordinatorClient:
    """Calls to one group's coordinator; safe to share between tasks of one event loop."""

    def __init__(
        self,
        transport: Transport,
        metadata: MetadataCache,
        group: str,
        *,
        retry_timeout_s: float = 30.0,
        route: str = GROUP_ROUTE,
        key: str = "group",
        outcomes: frozenset[str] = GROUP_ERRORS,
    ) -> None:
        """``route``/``key``/``outcomes``: the transaction coordinator is reached the same
        way (``txn/<op>``, keyed by ``transactional_id``, its own outcomes)."""
        self.transport = transport
        self.metadata = metadata
        self.group = group
        self.retry_timeout_s = retry_timeout_s
        self.route = route
        self.key = key
        self.outcomes = outcomes
        self.coordinator_id: int | None = None
        self.coordinator_url: str | None = None
        self._finding: asyncio.Task[str] | None = None
        self._last_found: int | None = None

    def forget(self) -> None:
        """Drop the cached coordinator: the next call looks it up again."""
        self.coordinator_id = None
        self.coordinator_url = None

    async def call(
        self, op: str, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """``group/<op>`` at the group's coordinator; the answer map, group-level ``error``
        included. ``body`` gets ``group`` if it lacks one. ``timeout_s`` bounds one attempt
        (a join long-polls for the whole join phase: give it the rebalance timeout).

        Raises ``ClientError`` when the coordinator stayed unreachable for
        ``retry_timeout_s`` (code ``COORDINATOR_NOT_AVAILABLE``, ``NOT_COORDINATOR``, ... as
        last seen) or for a refusal that is neither a coordinator move nor a group outcome.
        """
        body = {self.key: self.group, **body}
        # The budget runs from the first failure, not from the call: a join that long-polled
        # for most of a minute and then met a coordinator failover still gets its retries.
        deadline: float | None = None
        attempt = 0
        while True:
            try:
                url = await self._coordinator_url()
                answer = await self.transport.call_map(
                    url, f"{self.route}/{op}", body, timeout_s=timeout_s
                )
                err = _error_of(answer)
                if err is None or err in self.outcomes:
                    return answer
                if err not in COORDINATOR_ERRORS:
                    raise ClientError(
                        err,
                        f"{self.key} {self.group!r} {op}: {answer.get('message') or ''}".rstrip(
                            ": "
                        ),
                    )
                self._moved(answer)
                problem = ClientError(err, str(answer.get("message") or ""))
            except ClientError as e:
                if e.code not in COORDINATOR_ERRORS | CONNECTION_ERRORS:
                    raise
                self.forget()
                problem = e
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.retry_timeout_s
            if now >= deadline:
                raise ClientError(
                    problem.code,
                    f"{self.key} {self.group!r}: no coordinator answered {op} within "
                    f"{self.retry_timeout_s:g} s (last: {problem})",
                )
            attempt += 1
            await asyncio.sleep(
                min(BACKOFF_S_MIN * 2 ** (attempt - 1), BACKOFF_S_MAX, max(0.0, deadline - now))
            )

    def _moved(self, answer: dict[str, Any]) -> None:
        """A ``NOT_COORDINATOR`` may name the broker that coordinates now: go there next."""
        self.forget()
        hint = answer.get("coordinator_id")
        if isinstance(hint, int) and hint >= 0:
            b = self.metadata.current.brokers.get(hint)
            if b is not None and not b.fenced:
                self.coordinator_id, self.coordinator_url = hint, b.url

    async def _coordinator_url(self) -> str:
        if self.coordinator_url is not None:
            return self.coordinator_url
        # Concurrent callers (heartbeat, commit, join) share one lookup.
        if self._finding is None or self._finding.done():
            self._finding = asyncio.get_running_loop().create_task(self._find())
        return await asyncio.shield(self._finding)

    async def _find(self) -> str:
        """One ``find_coordinator`` round over the known brokers; raises the last refusal
        (``COORDINATOR_NOT_AVAILABLE`` while the offsets topic is being created, say) for
        ``call`` to back off and retry."""
        if not self.metadata.current.brokers:
            await self.metadata.refresh()
        urls = [b.url for b in self.metadata.current.brokers.values() if not b.fenced]
        urls = list(dict.fromkeys([*urls, *self.metadata.bootstrap]))
        last: ClientError | None = None
        for url in urls:
            try:
                answer = await self.transport.call_map(
                    url,
                    f"{self.route}/find_coordinator",
                    {self.key: self.group},
                    timeout_s=min(self.transport.request_timeout_s, 10.0),
                )
            except ClientError as e:
                last = e
                continue
            err = _error_of(answer)
            if err is not None and err != "NONE":
                if err not in COORDINATOR_ERRORS:
                    raise ClientError(
                        err,
                        f"find_coordinator for {self.key} {self.group!r}: {answer.get('message') or ''}",
                    )
                # Every broker answers from the same metadata: no point asking the rest.
                raise ClientError(err, str(answer.get("message") or ""))
            self.coordinator_id = int(answer["coordinator_id"])
            self.coordinator_url = str(answer["url"]).rstrip("/")
            if self.coordinator_id != self._last_found:
                log.info(
                    "group %s: coordinator is broker %d (%s)",
                    self.group,
                    self.coordinator_id,
                    self.coordinator_url,
                )
                self._last_found = self.coordinator_id
            return self.coordinator_url
        # No broker reachable: the metadata may name brokers that are gone.
        with contextlib.suppress(ClientError):
            await self.metadata.refresh()
        raise last or ClientError("NETWORK_EXCEPTION", "no broker to ask for the coordinator")


async def list_groups(
    transport: Transport, metadata: MetadataCache, *, retry_timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """Every group of the cluster, ``[{group, state, is_simple}, ...]`` sorted by group.

    Each broker lists only the groups it coordinates, so every live broker is asked (as
    Kafka's ``AdminClient.listConsumerGroups`` does). A broker that stays unreachable (or
    loading) for ``retry_timeout_s`` makes the listing incomplete, which raises
    ``ClientError`` rather than quietly leaving its groups out. A group two brokers list
    (leadership of its offsets partition moving) appears once.
    """
    md = await metadata.refresh()
    urls = sorted({b.url for b in md.brokers.values() if not b.fenced})
    if not urls:
        raise ClientError("BROKER_NOT_AVAILABLE", "no live broker to list groups from")

    async def one(url: str) -> list[dict[str, Any]]:
        deadline = time.monotonic() + retry_timeout_s
        attempt = 0
        while True:
            try:
                answer = await transport.call_map(url, f"{GROUP_ROUTE}/list", {})
                err = _error_of(answer)
                if err is None or err == "NONE":
                    return [dict(g) for g in answer.get("groups") or []]
                problem = ClientError(err, f"list at {url}: {answer.get('message') or ''}")
            except ClientError as e:
                problem = e
            if (
                problem.code not in COORDINATOR_ERRORS | CONNECTION_ERRORS
                or time.monotonic() >= deadline
            ):
                raise problem
            attempt += 1
            await asyncio.sleep(min(BACKOFF_S_MIN * 2 ** (attempt - 1), BACKOFF_S_MAX))

    merged: dict[str, dict[str, Any]] = {}
    for groups in await asyncio.gather(*(one(u) for u in urls)):
        for g in groups:
            merged.setdefault(str(g["group"]), g)
    return [merged[k] for k in sorted(merged)]
