"""raft: consensus for the metadata quorum.

A sans-IO core (``raft.core``: tick/step/propose/ready/advance) and a thin asyncio shell
(``raft.aio``). Imports only ``storage`` below it.
"""
