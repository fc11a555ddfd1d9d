"""The schemas workload: Schema Registry registrations, reads by id and reads by version.

Subjects, each evolving compatibly under the registry's default BACKWARD level: schema ``n`` of
the workload is an Avro record ``JepsenRec`` with fields ``f1..fn``, each an int with a
default, so any of them may follow any other (a reader with more fields fills the defaults, one
with fewer skips the rest). New subjects keep coming (`Subjects`: a new one every few
registrations, workers choosing among the newest few), so that new versions are written all
through the run and its faults rather than only in its first second. Workers, through random
brokers, register a random schema under one of the newest subjects (often one already
registered there: the same schema twice must answer the same id),
read a schema by an id some registration answered, and read a subject's version (a number or
``latest``). After the faults heal, every subject's versions are read once more: the final
state `jepsen_tests.checkers.schemas` holds every acknowledged registration against.

No deletes: a permanent delete lets an acknowledged registration vanish legitimately, and a soft
delete makes "same schema, same id" depend on the order of ops the history cannot pin.

As in the other workloads, a worker whose op ended in ``info`` returns as a new process id.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from jepsen_tests.cluster import DefiniteError, IndefiniteError
from jepsen_tests.history import READ_SCHEMA_ID as READ_ID
from jepsen_tests.history import READ_SUBJECT, Recorder
from jepsen_tests.history import READ_SUBJECT_VERSION as READ_VERSION
from jepsen_tests.history import REGISTER_SCHEMA as REGISTER

MAX_FIELDS = 6


class SchemaClient(Protocol):
    last_node: str | None

    async def register(self, subject: str, schema: str) -> int: ...

    async def schema_by_id(self, schema_id: int) -> str | None: ...

    async def version(self, subject: str, version: str) -> dict[str, Any] | None: ...

    async def versions(self, subject: str) -> list[int] | None: ...

    async def close(self) -> None: ...


def schema_text(n: int) -> str:
    """Schema ``n`` of the workload: a record of n int fields, each with a default."""
    fields = [{"name": f"f{i}", "type": "int", "default": i} for i in range(1, n + 1)]
    return json.dumps({"type": "record", "name": "JepsenRec", "fields": fields})


def schema_key(text: str) -> str:
    """What identifies a schema in the history: its field names (``"f1,f2"``), so that a
    registry answering a reformatted text still names the same schema; text that is not one
    of the workload's records keys as itself, and never matches one."""
    try:
        d = json.loads(text)
        return ",".join(str(f["name"]) for f in d["fields"])
    except (ValueError, KeyError, TypeError):
        return "?" + text


class Subjects:
    """The run's subjects, shared by its workers: a new one every `every` registrations,
    each op choosing among the `window` newest."""

    def __init__(self, every: int = 8, window: int = 3) -> None:
        self.names: list[str] = []
        self.every = every
        self.window = window
        self.registrations = 0

    def for_register(self, rng: random.Random) -> str:
        if self.registrations % self.every == 0:
            self.names.append(f"jepsen-{len(self.names)}-value")
        self.registrations += 1
        return rng.choice(self.names[-self.window :])

    def for_read(self, rng: random.Random) -> str:
        return rng.choice(self.names[-self.window :])


class SchemaWorker:
    def __init__(
        self,
        index: int,
        n_workers: int,
        client: SchemaClient,
        subjects: Subjects,
        recorder: Recorder,
        rng: random.Random,
        known_ids: list[int],
    ) -> None:
        self.process = index
        self.n_workers = n_workers
        self.client = client
        self.subjects = subjects
        self.rec = recorder
        self.rng = rng
        # Ids some registration answered (shared by the workers): what reads by id ask for.
        self.known_ids = known_ids

    async def _op(
        self, f: str, inv: dict[str, Any], call: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any] | None:
        p = self.process
        self.rec.invoke(p, f, inv)
        try:
            out = await call()
        except DefiniteError as e:
            self.rec.fail(p, f, inv, error=str(e))
            return None
        except IndefiniteError as e:
            self.rec.info(p, f, inv, error=str(e))
            self.process += self.n_workers
            return None
        node = self.client.last_node
        self.rec.ok(p, f, {**inv, **out}, **({"node": node} if node else {}))
        return out

    async def step(self) -> None:
        r = self.rng.random()
        if r < 0.4 or not self.known_ids:
            s = self.subjects.for_register(self.rng)
            n = self.rng.randint(1, MAX_FIELDS)
            text = schema_text(n)

            async def register() -> dict[str, Any]:
                return {"id": await self.client.register(s, text)}

            out = await self._op(REGISTER, {"subject": s, "schema": schema_key(text)}, register)
            if out is not None and out["id"] not in self.known_ids:
                self.known_ids.append(out["id"])
        elif r < 0.7:
            i = self.rng.choice(self.known_ids)

            async def by_id() -> dict[str, Any]:
                text = await self.client.schema_by_id(i)
                return {"schema": None if text is None else schema_key(text)}

            await self._op(READ_ID, {"id": i}, by_id)
        else:
            s = self.subjects.for_read(self.rng)
            v = self.rng.choice(["latest", "1", "2", "3", str(self.rng.randint(1, MAX_FIELDS))])

            async def by_version() -> dict[str, Any]:
                got = await self.client.version(s, v)
                if got is None:
                    return {"found": False}
                return {
                    "found": True,
                    "version_got": int(got["version"]),
                    "id": int(got["id"]),
                    "schema": schema_key(str(got["schema"])),
                }

            await self._op(READ_VERSION, {"subject": s, "version": v}, by_version)

    async def read_subject(self, s: str) -> None:
        """Every version of a subject with its id and schema (the final read)."""

        async def read() -> dict[str, Any]:
            vs = await self.client.versions(s)
            out: list[dict[str, Any]] = []
            for v in vs or []:
                got = await self.client.version(s, str(v))
                if got is None:
                    raise DefiniteError(f"{s} version {v} listed but not found")
                out.append(
                    {
                        "version": int(got["version"]),
                        "id": int(got["id"]),
                        "schema": schema_key(str(got["schema"])),
                    }
                )
            return {"versions": out}

        await self._op(READ_SUBJECT, {"subject": s}, read)

    async def run(self, deadline: float, pause_s: float = 0.01) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < deadline:
            await self.step()
            await asyncio.sleep(pause_s)


async def final_reads(
    client: SchemaClient,
    subjects: Sequence[str],
    rec: Recorder,
    *,
    process: int,
    timeout_s: float = 60.0,
) -> dict[str, bool]:
    """Read every subject until one read succeeds (the cluster has healed, but a broker may
    still be catching up its registry); True per subject that was read."""
    done: dict[str, bool] = {}
    w = SchemaWorker(process, 1, client, Subjects(), rec, random.Random(0), [])
    loop = asyncio.get_running_loop()
    for s in subjects:
        deadline = loop.time() + timeout_s
        done[s] = False
        while loop.time() < deadline:
            n = len(rec.history())
            await w.read_subject(s)
            last = rec.history().ops[n:]
            if last and last[-1].type == "ok":
                done[s] = True
                break
            await asyncio.sleep(0.5)
    return done
