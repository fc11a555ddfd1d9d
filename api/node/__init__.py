"""api.node: the process entry points (broker and controller apps), node config, the local-cluster launcher."""
