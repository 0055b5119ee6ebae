# What a produced batch must pass before the log takes it, as Kafka's LogValidator checks it.
# The checks run in this order and the first that fails is the partition's answer (nothing of
# the batch is appended; the request's other partitions are unaffected):
# 1. records present: INVALID_RECORD "null records";
# 2. at most max.message.bytes as sent: MESSAGE_TOO_LARGE;
# 3. exactly one v2 batch with a valid CRC-32C, consistent header counts and no control flag
#    (protocol/records.py): CORRUPT_MESSAGE or INVALID_RECORD;
# 4. on a compacted topic, a key on every record: INVALID_RECORD (the first cleaning would
#    drop a keyless record, so Kafka refuses it);
# 5. each record's CreateTime timestamp and the batch's decompressed size
#    (log/record_limits.py): INVALID_TIMESTAMP or INVALID_RECORD;
# 6. re-encoded with the topic's codec when compression.type names another one
#    (protocol/recompress.py), header fields kept; the result must fit max.message.bytes too.
# Pure: the topic's LogConfig and the request's time are passed in. The partition writer
# (replication/writer.py) calls it before it appends as leader.
from __future__ import annotations

from lockgate.config.log import LogConfig
from lockgate.log.record_limits import check_records
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.recompress import recompress
from lockgate.protocol.records import BatchHeader, validate_produced_batch
from lockgate.protocol.rewrite import split_records


def validate(records: bytes | None, config: LogConfig, now_ms: int) -> tuple[bytes, BatchHeader]:
    """The batch the log appends (re-encoded if the topic's codec says so) and its header;
    raises KafkaProtocolError with the partition's answer for the first check that fails."""
    if records is None:
        raise KafkaProtocolError(ErrorCode.invalid_record, "null records")
    if len(records) > config.max_message_bytes:
        raise KafkaProtocolError(
            ErrorCode.message_too_large,
            f"batch of {len(records)} bytes exceeds max.message.bytes",
        )
    header = validate_produced_batch(records)
    if config.compact:
        _require_keys(records)
    check_records(records, header, config, now_ms)
    return _with_topic_codec(records, header, config)


def _require_keys(records: bytes) -> None:
    """A compacted topic keeps the latest record per key: a record without one is refused, as
    Kafka does (it would be dropped by the first cleaning)."""
    try:
        keyless = [r.offset_delta for r in split_records(records)[2] if r.key is None]
    except ValueError as exc:
        raise KafkaProtocolError(ErrorCode.corrupt_message, str(exc)) from None
    if keyless:
        raise KafkaProtocolError(
            ErrorCode.invalid_record,
            f"compacted topic cannot accept a record without a key (offset delta {keyless[0]})",
        )


def _with_topic_codec(
    records: bytes, header: BatchHeader, config: LogConfig
) -> tuple[bytes, BatchHeader]:
    """The batch re-encoded when the topic's compression.type names another codec (as Kafka);
    like Kafka, the re-encoded batch must fit max.message.bytes too (MESSAGE_TOO_LARGE)."""
    codec = config.compression_codec
    if codec is None or codec == header.compression:
        return records, header
    rebuilt, rebuilt_header = recompress(records, codec, config.compression_level)
    if len(rebuilt) > config.max_message_bytes:
        raise KafkaProtocolError(
            ErrorCode.message_too_large,
            f"batch of {len(rebuilt)} bytes once recompressed exceeds max.message.bytes",
        )
    return rebuilt, rebuilt_header
