"""Kafka's binary protocol on each broker: a second front door beside the HTTP API.

``protocol`` (pure) frames and versions, ``handlers`` answer each API over the broker's own
replica manager, coordinator and image, ``server`` is the asyncio listener.
docs/kafka-protocol.md says what is served and how it differs from Apache Kafka.
"""
