"""metalog.records (being written)."""
