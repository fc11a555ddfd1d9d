"""One consumer-group member as its own process, for the real-process group tests.

    python group_member.py BOOTSTRAP GROUP TOPIC STRATEGY OUT [SESSION_MS]

Consumes with ``AsyncGroupConsumer`` (manual commits: each poll's records are written to OUT
and flushed, then committed, so "processed" always precedes "committed"), and writes one line
per event to OUT:

    R <monotonic_ns> <partition> <offset> <value>      a record processed
    A <monotonic_ns> <p,p,...>                         partitions assigned
    V <monotonic_ns> <p,p,...>                         partitions revoked

SIGTERM closes the consumer (commit, leave); SIGKILL is the test's crash.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

from api.client import AsyncGroupConsumer, CommitFailedError, TopicPartition


async def main() -> None:
    # The client's own account of joins, plans and retries, for the test's failure report.
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    bootstrap, group, topic, strategy, out_path = sys.argv[1:6]
    session_ms = int(sys.argv[6]) if len(sys.argv) > 6 else 6000
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def event(kind: str, tps: set[TopicPartition]) -> None:
        parts = ",".join(str(tp.partition) for tp in sorted(tps))
        out.write(f"{kind} {time.monotonic_ns()} {parts}\n")
        out.flush()

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    c = AsyncGroupConsumer(
        bootstrap.split(","),
        group_id=group,
        client_id=f"m{os.getpid()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=session_ms // 6,
        # Also the rebalance timeout (KIP-62): a member whose first join's
        # answer was lost under load leaves a stray member id that holds a
        # rebalance until this passes; 300 s would outlast the test.
        max_poll_interval_ms=20_000,
        partition_assignment_strategy=strategy,
    )
    await c.start()
    c.subscribe(
        [topic], on_assigned=lambda tps: event("A", tps), on_revoked=lambda tps: event("V", tps)
    )
    try:
        while not stop.is_set():
            recs = await c.poll(200)
            if not recs:
                continue
            now = time.monotonic_ns()
            out.write(
                "".join(
                    f"R {now} {r.partition} {r.offset} {(r.value or b'').decode()}\n" for r in recs
                )
            )
            out.flush()
            os.fsync(out.fileno())
            try:
                await c.commit()
            except CommitFailedError:
                pass  # rebalanced away meanwhile: the new owner reprocesses (at least once)
    finally:
        await c.close()
        out.close()


if __name__ == "__main__":
    asyncio.run(main())
