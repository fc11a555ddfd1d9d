"""raft.tracker (being written)."""
