"""api.cli: the ``longboat`` command line (entry point ``api.cli.main``; shared pieces in ``api.cli.common``)."""
