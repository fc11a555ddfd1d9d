"""Client workloads: what the worker processes do against a cluster."""
