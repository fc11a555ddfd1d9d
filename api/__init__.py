"""api: the composition root: HTTP routes, the Python client, the CLI, process entry points."""
