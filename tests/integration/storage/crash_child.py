"""Child process for the crash tests: append and flush forever, acknowledging synced offsets.

Usage: python crash_child.py LOG_DIR. Prints ``synced N`` (every record below N is fsynced)
after each flush, and is killed with SIGKILL by its parent. With ``LONGBOAT_LAZYFS=1`` the
file layer keeps unsynced bytes in this process's memory, so the kill loses them.
"""

from __future__ import annotations

import sys

from storage.batch import encode_batch
from storage.config import LogConfig
from storage.fileio import default_file_layer
from storage.log import PartitionLog


def main() -> None:
    log = PartitionLog.open(sys.argv[1], LogConfig(segment_bytes=64 * 1024), default_file_layer())
    seq = log.log_end_offset
    i = 0
    while True:
        n = 1 + i % 7
        recs = [(b"k%d" % ((seq + j) % 10), b"value-%d" % (seq + j) + b"x" * (i % 50), seq + j, [])
                for j in range(n)]
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
