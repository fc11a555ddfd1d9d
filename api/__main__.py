"""``python -m api ...`` is the ``longboat`` command (for tests and hosts without the script)."""

from api.cli.main import main

main()
