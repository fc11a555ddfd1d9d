"""metalog.controller (being written)."""
