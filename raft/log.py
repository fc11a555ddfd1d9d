"""raft.log (being written)."""
