"""raft.storage_port (being written)."""
