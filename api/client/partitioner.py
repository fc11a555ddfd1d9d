"""Which partition a record goes to: Kafka's default partitioner.

A record with a key goes to ``toPositive(murmur2(key)) % partitions``, byte for byte Kafka's
``BuiltInPartitioner.partitionForKey``, so keys land on the partitions Kafka users expect
(the same key to the same partition as a Java producer would choose for the same partition
count). A record without a key is *sticky* (KIP-480): it goes to the partition the producer is
currently filling, and the producer moves to another partition when that batch is sealed, so
keyless records form full batches instead of one small batch per partition.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as an unsigned 32-bit value."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    extra = length & 3
    if extra == 3:
        h ^= data[n4 + 2] << 16
    if extra >= 2:
        h ^= data[n4 + 1] << 8
    if extra >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
