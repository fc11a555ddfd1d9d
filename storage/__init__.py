"""storage: segmented, append-only logs on disk.

The bottom layer. Owns the batch format, segment files and their indexes, retention,
compaction, group fsync and crash recovery. Imports nothing from Longboat's other packages.
"""
