"""Longboat's Python client: producers and consumers that talk to brokers directly.

``AsyncProducer``/``AsyncConsumer``/``AsyncGroupConsumer`` are the asyncio clients;
``Producer``/``Consumer``/``GroupConsumer`` are their synchronous twins (the same code on a
loop thread). ``Admin`` administers ACLs and SCRAM users (docs/security.md); ``ClientSecurity``
is how any of them reaches a secure cluster. See docs/client.md.
"""

from api.client.admin import Admin
from api.client.consumer import AsyncConsumer, NoOffsetError
from api.client.errors import (
    ClientError,
    CommitFailedError,
    ProducerFencedError,
    TransactionAbortedError,
)
from api.client.group import AsyncGroupConsumer
from api.client.producer import AsyncProducer, BatchDelivery
from api.client.security import ClientSecurity
from api.client.sync import Consumer, GroupConsumer, Producer
from api.client.transport import ClusterMetadata, fetch_cluster_metadata
from api.client.types import ConsumerGroupMetadata, ConsumerRecord, RecordMetadata, TopicPartition

__all__ = [
    "Admin",
    "AsyncConsumer",
    "AsyncGroupConsumer",
    "AsyncProducer",
    "BatchDelivery",
    "ClientError",
    "ClientSecurity",
    "ClusterMetadata",
    "CommitFailedError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "GroupConsumer",
    "NoOffsetError",
    "Producer",
    "ProducerFencedError",
    "RecordMetadata",
    "TopicPartition",
    "TransactionAbortedError",
    "fetch_cluster_metadata",
]
