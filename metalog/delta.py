"""metalog.delta (being written)."""
