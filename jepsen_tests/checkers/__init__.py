"""History checkers: pure functions from a `History` to a JSON-able result with `valid`.

`queue` checks Kafka-style send/poll histories (Jepsen's `jepsen.tests.kafka` anomalies);
`linear` checks per-key register histories for linearizability (the metadata workload).
"""
