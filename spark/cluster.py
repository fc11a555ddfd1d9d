"""What the driver asks the cluster while planning: topics, partitions, leaders, offsets.

Through the Python client (``api.client``) only: cluster metadata from any broker, and
``ListOffsets`` answers (earliest = log start, latest = high watermark, by timestamp) from each
partition's leader. One ``ClusterView`` serves one planning step and is closed after it, so
no client, thread or socket outlives the call (nor is pickled with a reader). TLS and
credentials (``SecurityOptions``) go to every call; a refusal of them is a
``LongboatAuthError`` (``spark.security``).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

from api.client import (
    ClientError,
    ClusterMetadata,
    Consumer,
    TopicPartition,
    fetch_cluster_metadata,
)
from spark.options import LongboatOptionError, Offsets, SecurityOptions, SourceOptions
from spark.planning import TopicPartitions
from spark.security import (
    auth_error,
    auth_headers,
    client_security,
    reraise_auth,
    ssl_context,
)


class ClusterView:
    def __init__(
        self,
        bootstrap: tuple[str, ...],
        *,
        timeout_ms: int = 30_000,
        isolation_level: str = "read_uncommitted",
        security: SecurityOptions = SecurityOptions(),
    ) -> None:
        self.security = security
        self.isolation_level = isolation_level
        """``kafka.isolation.level``: at read_committed, "latest" is the last stable offset."""
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self._consumer: Consumer | None = None
        self._metadata: ClusterMetadata | None = None

    def __enter__(self) -> ClusterView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                list(self.bootstrap),
                request_timeout_ms=self.timeout_ms,
                isolation_level=self.isolation_level,
                security=client_security(self.security),
            )
        return self._consumer

    @property
    def metadata(self) -> ClusterMetadata:
        if self._metadata is None:
            try:
                self._metadata = asyncio.run(
                    fetch_cluster_metadata(
                        list(self.bootstrap),
                        timeout_s=self.timeout_ms / 1000,
                        security=client_security(self.security),
                    )
                )
            except ClientError as e:
                reraise_auth(e)
                raise ConnectionError(
                    f"no Longboat broker answered at {', '.join(self.bootstrap)}: {e}"
                ) from e
        return self._metadata

    def topic_partitions(self, opts: SourceOptions, *, missing_ok: bool) -> TopicPartitions:
        """The partitions a read covers. A named topic that does not exist is an error for a
        batch read; a stream (``missing_ok``) reads it once it is created, as Kafka's does."""
        topics = self.metadata.topics
        out: TopicPartitions = {}
        if opts.assign is not None:
            for t, ps in opts.assign.items():
                have = topics.get(t)
                if have is None:
                    if missing_ok:
                        continue
                    raise LongboatOptionError(f"option 'assign': topic {t!r} does not exist")
                gone = [p for p in ps if p not in have]
                if gone and not missing_ok:
                    raise LongboatOptionError(
                        f"option 'assign': topic {t!r} has partitions {sorted(have)}, not {gone}"
                    )
                out[t] = [p for p in ps if p in have]
        elif opts.subscribe:
            for t in opts.subscribe:
                if t not in topics:
                    if missing_ok:
                        continue
                    raise LongboatOptionError(f"option 'subscribe': topic {t!r} does not exist")
                out[t] = sorted(topics[t])
        else:
            out = {t: sorted(ps) for t, ps in topics.items() if opts.matches(t)}
        return {t: ps for t, ps in out.items() if ps}

    def earliest(self, tps: TopicPartitions) -> Offsets:
        try:
            return _nest(self.consumer.beginning_offsets(_flat(tps)))
        except ClientError as e:
            reraise_auth(e)
            raise

    def latest(self, tps: TopicPartitions) -> Offsets:
        try:
            return _nest(self.consumer.end_offsets(_flat(tps)))
        except ClientError as e:
            reraise_auth(e)
            raise

    def offsets_for_times(
        self, wanted: dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], int | None]:
        if not wanted:
            return {}
        try:
            got = self.consumer.offsets_for_times(
                {TopicPartition(t, p): ts for (t, p), ts in wanted.items()}
            )
        except ClientError as e:
            reraise_auth(e)
            raise
        return {(tp.topic, tp.partition): off for tp, off in got.items()}

    def urls_for(self, topic: str, partition: int) -> tuple[str, ...]:
        """The partition's leader first, then every other broker (any broker forwards)."""
        md = self.metadata
        leader = md.leader_url(topic, partition)
        others = [b.url for b in md.brokers.values() if not b.fenced]
        return tuple(dict.fromkeys([*([leader] if leader else []), *others, *self.bootstrap]))

    def cluster_id(self) -> str | None:
        """The id in the HTTP API's v3 paths, or None when brokers serve no ``/v3/clusters``
        (the reader then fetches raw batches and builds the Arrow rows itself)."""
        for url in self.bootstrap:
            req = urllib.request.Request(f"{url}/v3/clusters", headers=auth_headers(self.security))
            try:
                with urllib.request.urlopen(
                    req, timeout=self.timeout_ms / 1000, context=ssl_context(self.security)
                ) as r:
                    data: Any = json.loads(r.read())
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return None
                if e.code in (401, 403):
                    raise auth_error(e.code, _message(e), url) from None
                continue
            except (OSError, ValueError):
                continue
            items = data.get("data") if isinstance(data, dict) else None
            if items:
                return str(items[0]["cluster_id"])
            return None
        return None


def _message(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read()).get("message", ""))
    except (ValueError, AttributeError, OSError):
        return f"HTTP {e.code}"


def _flat(tps: TopicPartitions) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, ps in tps.items() for p in ps]


def _nest(got: dict[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for tp, off in got.items():
        out.setdefault(tp.topic, {})[tp.partition] = off
    return out


def merge(tps: Iterable[tuple[str, int]]) -> TopicPartitions:
    out: TopicPartitions = {}
    for t, p in tps:
        out.setdefault(t, []).append(p)
    return {t: sorted(ps) for t, ps in out.items()}
