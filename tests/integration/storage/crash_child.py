"""Child process for the crash tests: append and flush forever, acknowledging synced offsets.

Usage: python crash_child.py LOG_DIR [--group-commit]. Prints ``synced N`` (every record below N is fsynced)
after each flush, and is killed with SIGKILL by its parent. With ``LONGBOAT_LAZYFS=1`` the
file layer keeps unsynced bytes in this process's memory, so the kill loses them. With ``--group-commit`` four asyncio
producers append and await ``GroupCommitter.durable`` instead, acknowledging each append.
"""

from __future__ import annotations

import asyncio
import sys

from storage.batch import encode_batch
from storage.config import LogConfig
from storage.fileio import default_file_layer
from storage.group_commit import GroupCommitter
from storage.log import PartitionLog


async def group_commit_loop(log: PartitionLog) -> None:
    """Four producers appending and awaiting durable acks; ack lines name offsets."""
    committer = GroupCommitter()

    async def producer(p: int) -> None:
        for i in range(10**9):
            seq = log.log_end_offset
            recs = [(b"p%d" % p, b"value-%d" % seq + b"x" * (i % 50), seq, [])]
            _, last = log.append(encode_batch(recs), leader_epoch=1)
            await committer.durable(log, last + 1)
            sys.stdout.write(f"synced {last + 1}\n")
            sys.stdout.flush()

    await asyncio.gather(*(producer(p) for p in range(4)))


def main() -> None:
    log = PartitionLog.open(sys.argv[1], LogConfig(segment_bytes=64 * 1024), default_file_layer())
    if len(sys.argv) > 2 and sys.argv[2] == "--group-commit":
        asyncio.run(group_commit_loop(log))
        return
    seq = log.log_end_offset
    i = 0
    while True:
        n = 1 + i % 7
        recs = [
            (b"k%d" % ((seq + j) % 10), b"value-%d" % (seq + j) + b"x" * (i % 50), seq + j, [])
            for j in range(n)
        ]
        base, last = log.append(encode_batch(recs), leader_epoch=1 + i // 100)
        assert base == seq
        seq = last + 1
        i += 1
        if i % 5 == 0:
            flushed = log.flush()
            sys.stdout.write(f"synced {flushed}\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
