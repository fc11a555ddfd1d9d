"""metalog.image (being written)."""
