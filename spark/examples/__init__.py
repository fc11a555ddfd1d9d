"""Runnable examples of the longboat data source (see docs/spark.md for the commands)."""
