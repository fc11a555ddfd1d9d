"""storage: segmented, append-only logs on disk.

The bottom layer. Owns the batch format, segment files and their indexes, retention,
compaction, group fsync and crash recovery. Imports nothing from Longboat's other packages.

Modules (pure ones do no I/O, read no clock, use no global random; the import-linter
contract in pyproject.toml holds them to it):

=====================  =====  ==========================================================
module                 pure   owns
=====================  =====  ==========================================================
batch                  yes    the record batch codec (61-byte header, CRC-32C, msgpack)
compression            yes    body codecs
config                 yes    ``LogConfig`` from Kafka's topic config names
index                  yes    sparse offset and time indexes and their file encodings
flush_policy           yes    ``FlushPolicy``: when a log flushes with nobody waiting
errors, types,         yes    errors, ``NewType`` nouns, ``invariant()``
invariant
fileio                 no     ``FileLayer``: real, and lazy (loses unsynced bytes)
segment                no     one ``.log`` with its indexes
epoch_cache            no     the leader epoch cache (KIP-101) and its checkpoint file
checkpoint             no     recovery point, log start, clean-shutdown marker files
logdir                 no     ``LogDirectory``: a data directory online or failed (EIO)
log                    no     ``PartitionLog``: segments, offsets, recovery, retention
cleaner                no     compaction
group_commit           no     ``GroupCommitter``: asyncio group fsync across logs
dump                   no     read-only inspection for ``longboat log dump|verify``
=====================  =====  ==========================================================

Formats byte by byte: docs/storage-format.md. Operating and debugging: docs/storage.md.
"""
