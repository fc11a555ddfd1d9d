"""metalog.placement (being written)."""
