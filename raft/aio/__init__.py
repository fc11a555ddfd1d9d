"""raft.aio: the asyncio shell around the pure core: node task, transport, durable log."""
