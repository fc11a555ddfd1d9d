"""raft.quorum (being written)."""
