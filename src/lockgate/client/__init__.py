# lockgate.client — lockgate's own asyncio Kafka client: connections with version negotiation,
# cluster metadata, admin, a plain producer, a consumer and a share consumer (KIP-932). It
# speaks the Kafka protocol only, so it works against any Kafka-compatible broker.
from __future__ import annotations

from lockgate.client.admin import Admin, ConfigEntry, ConfigSource, NewTopic, TopicDescription
from lockgate.client.cluster import Cluster, PartitionInfo, TopicInfo, TopicPartition
from lockgate.client.connection import BrokerConnection
from lockgate.client.consumer import Consumer, IsolationLevel, Message, OffsetReset
from lockgate.client.errors import KafkaError
from lockgate.client.producer import Producer, RecordMetadata
from lockgate.client.share_consumer import AcknowledgementMode, ShareConsumer
from lockgate.client.share_records import ShareRecord
from lockgate.client.share_session import AcknowledgeType

__all__ = [
    "AcknowledgeType",
    "AcknowledgementMode",
    "Admin",
    "BrokerConnection",
    "Cluster",
    "ConfigEntry",
    "ConfigSource",
    "Consumer",
    "IsolationLevel",
    "KafkaError",
    "Message",
    "NewTopic",
    "OffsetReset",
    "PartitionInfo",
    "Producer",
    "RecordMetadata",
    "ShareConsumer",
    "ShareRecord",
    "TopicDescription",
    "TopicInfo",
    "TopicPartition",
]
