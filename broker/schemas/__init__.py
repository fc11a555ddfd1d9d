"""The Schema Registry: a Confluent-compatible registry kept in the compacted ``_schemas`` topic.

* ``avro_compat``  : can an Avro reader schema read every datum of a writer schema (pure).
* ``json_compat``  : does a JSON Schema accept every document another accepts (pure).
* ``parse``        : parse, check and identify AVRO and JSON schemas with their references (pure).
* ``records``      : the ``_schemas`` records (keys and values, Confluent's shapes) (pure).
* ``state``        : ``RegistryState``: subjects, versions, ids, configs and modes, rebuilt by
  ``replay``; ``decide_*`` turns a write request into records and an answer (pure).
* ``registry``     : ``SchemaRegistry``, the asyncio shell on every broker: it tails
  ``_schemas``, answers reads, and writes through the single writer (the leader of
  ``_schemas`` partition 0), forwarding to it from other brokers.
* ``routes``       : the internal route other brokers forward writes on (msgpack).

See docs/schemas.md.
"""
