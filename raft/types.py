"""raft.types (being written)."""
