"""raft.core (being written)."""
