"""raft.messages (being written)."""
