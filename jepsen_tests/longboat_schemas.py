"""The schemas workload's client for Longboat: the Schema Registry REST API every broker
serves, each op through a broker chosen at random.

Plain HTTP over aiohttp rather than `api.client.schemas.SchemaRegistryClient`: that client is
synchronous and caches ids and schemas, and a cache would answer reads the workload means to
ask the cluster (an id read served from the client's memory checks nothing).

Outcomes as for topic admin (`LongboatMetadataClient`, whose session and request handling this
reuses): a 4xx refusal is DefiniteError; a 5xx, a timeout or a dropped connection after sending
is IndefiniteError for a registration (it may have been written to ``_schemas``) and
DefiniteError for a read (a read changes nothing).
"""

from __future__ import annotations

from typing import Any

from jepsen_tests.cluster import DefiniteError, IndefiniteError
from jepsen_tests.longboat_client import LongboatCluster, LongboatMetadataClient


class LongboatSchemaClient(LongboatMetadataClient):
    def __init__(self, cluster: LongboatCluster, name: str, host: str, timeout_s: float = 10.0):
        super().__init__(cluster, name, host, timeout_s=timeout_s)

    def _broker(self) -> str:
        broker = self.rng.choice(self.cluster.brokers)
        self.last_node = broker
        return self.cluster.url(broker)

    async def _read(self, path: str) -> tuple[int, Any]:
        try:
            return await self._request("GET", self._broker(), path)
        except IndefiniteError as e:
            raise DefiniteError(str(e)) from e

    async def register(self, subject: str, schema: str) -> int:
        status, body = await self._request(
            "POST", self._broker(), f"/subjects/{subject}/versions", {"schema": schema}
        )
        if status == 200 and isinstance(body, dict) and "id" in body:
            return int(body["id"])
        raise self._error(status, body, f"register under {subject}")

    async def schema_by_id(self, schema_id: int) -> str | None:
        status, body = await self._read(f"/schemas/ids/{schema_id}")
        if status == 200:
            return str(body["schema"])
        if status == 404:
            return None
        raise DefiniteError(f"schema {schema_id}: HTTP {status}: {body}")

    async def version(self, subject: str, version: str) -> dict[str, Any] | None:
        status, body = await self._read(f"/subjects/{subject}/versions/{version}")
        if status == 200:
            return dict(body)
        if status == 404:
            return None
        raise DefiniteError(f"{subject} version {version}: HTTP {status}: {body}")

    async def versions(self, subject: str) -> list[int] | None:
        status, body = await self._read(f"/subjects/{subject}/versions")
        if status == 200:
            return [int(v) for v in body]
        if status == 404:
            return None
        raise DefiniteError(f"{subject} versions: HTTP {status}: {body}")
