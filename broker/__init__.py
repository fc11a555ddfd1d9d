"""broker: partition replicas, ISR replication, produce and fetch, groups, idempotence."""
