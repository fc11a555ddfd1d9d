"""metalog: metadata records, immutable images built by replay, and the controller logic.

Runs on ``raft``. Records in, images out: nothing but ``MetadataDelta.replay`` changes state.
"""
