# The per-record limits Kafka's LogValidator applies to a produced batch, from the topic's
# configs: message.timestamp.before.max.ms / message.timestamp.after.max.ms on CreateTime
# topics (INVALID_TIMESTAMP) and max.decompressed.message.bytes on compressed batches
# (INVALID_RECORD). Sans-IO; the broker's clock is passed in.
#
# Cost: at Kafka's defaults (no lower timestamp bound, no decompressed-size cap) the batch
# header decides: only a batch whose max timestamp is past the upper bound has its records
# read, to name the first one out of range. A lower bound or a size cap set on a topic reads
# (and decompresses) every batch produced to it, as Kafka does.
from __future__ import annotations

from lockgate.config.log import LogConfig
from lockgate.protocol.errors import ErrorCode, KafkaProtocolError
from lockgate.protocol.records import BatchHeader
from lockgate.protocol.rewrite import split_records

LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1
NO_DECOMPRESSED_LIMIT = 2147483639  # max.decompressed.message.bytes' default


def _java_long(value: int) -> int:
    """The value as Java's long arithmetic leaves it (Kafka's message shows the bounds so)."""
    return (value + 2**63) % 2**64 - 2**63


def check_records(batch: bytes, header: BatchHeader, config: LogConfig, now_ms: int) -> None:
    """Raises INVALID_TIMESTAMP for the first record whose CreateTime timestamp is further
    from `now_ms` than the topic allows, INVALID_RECORD for the first record of a compressed
    batch larger once decompressed than max.decompressed.message.bytes; Kafka's messages."""
    before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
    check_times = not config.log_append_time and (
        before < LONG_MAX or header.max_timestamp - now_ms > after
    )
    limit = config.max_decompressed_message_bytes
    check_sizes = header.compression != 0 and limit < NO_DECOMPRESSED_LIMIT
    if not check_times and not check_sizes:
        return
    try:
        records = split_records(batch)[2]
    except ValueError as exc:
        raise KafkaProtocolError(ErrorCode.corrupt_message, str(exc)) from None
    for record in records:
        size = record.end - record.delta_start + 1  # the record's length: after its varint
        if check_sizes and size > limit:
            raise KafkaProtocolError(
                ErrorCode.invalid_record,
                f"Invalid record size: {size} exceeds the configured maximum record size of "
                f"{limit}.",
            )
        timestamp = header.base_timestamp + record.timestamp_delta
        out_of_range = now_ms - timestamp > before or timestamp - now_ms > after
        if check_times and timestamp != NO_TIMESTAMP and out_of_range:
            lowest, highest = _java_long(now_ms - before), _java_long(now_ms + after)
            offset = header.base_offset + record.offset_delta
            raise KafkaProtocolError(
                ErrorCode.invalid_timestamp,
                f"Timestamp {timestamp} of message with offset {offset} is out of range. "
                f"The timestamp should be within [{lowest}, {highest}]",
            )
