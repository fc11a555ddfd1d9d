"""common: small helpers every layer shares (asyncio waits, source-address binding, invariants).

The bottom of the layer stack, below storage: it imports no project package. It exists so that
the client library and storage do not have to import the raft package for an asyncio wait."""
