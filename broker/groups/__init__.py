"""Consumer groups: the pure core the group coordinator on a broker drives.

* ``types``     : ``TopicPartition``, group states, rebalance protocols, error codes.
* ``assignors`` : range, round-robin, sticky and cooperative-sticky partition assignment.
* ``records``   : the ``__consumer_offsets`` records (offset commits, group metadata,
  tombstones) and their msgpack encoding.
* ``group``     : the group state machine and ``GroupCoordinatorState``.

Pure: no I/O, no clock, no global random. Time arrives as ``now_ms``; member ids come from
an injected factory. See docs/consumer-groups.md.
"""
