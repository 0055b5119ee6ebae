# client/errors.py — the exceptions the client raises: one class per Kafka error code, named
# after the code (UNKNOWN_TOPIC_OR_PARTITION → UnknownTopicOrPartitionError), all under
# KafkaError with the code and its retriable flag, plus the client's own failures (connection,
# timeout) which reuse the codes Kafka gives them.
#
# The classes a caller is likely to catch are written out so that type checkers see them; the
# rest are made from kio's ErrorCode table, so every code the broker can send has a class.
from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_class", "error_for"]


class KafkaError(Exception):
    """A Kafka error. `code` is the protocol error code; `retriable` says whether the same
    request may succeed later (after a metadata refresh, a reconnect or a backoff)."""

    code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code.name.upper())
        self.message = message

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)

    def __str__(self) -> str:
        name = self.code.name.upper()
        return f"{name}: {self.message}" if self.message else name


# ---------------------------------------------------------------------------------------------
# Client-side failures. They reuse Kafka's codes, as the Java client does.


class KafkaConnectionError(KafkaError):
    """The TCP connection could not be opened, or broke with requests in flight."""

    code = ErrorCode.network_exception


class KafkaTimeoutError(KafkaError):
    """No response within the request timeout (the connection is closed: see connection.py)."""

    code = ErrorCode.request_timed_out


class CorruptRecordError(KafkaError):
    """A fetched batch failed its CRC-32C or could not be parsed."""

    code = ErrorCode.corrupt_message


# ---------------------------------------------------------------------------------------------
# Broker error codes a caller is likely to handle by name.


class UnknownServerError(KafkaError):
    code = ErrorCode.unknown_server_error


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.offset_out_of_range


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class LeaderNotAvailableError(KafkaError):
    code = ErrorCode.leader_not_available


class NotLeaderOrFollowerError(KafkaError):
    code = ErrorCode.not_leader_or_follower


class RequestTimedOutError(KafkaError):
    """The broker's own timeout (e.g. acks=-1 waiting for replicas), not the client's."""

    code = ErrorCode.request_timed_out


class MessageTooLargeError(KafkaError):
    code = ErrorCode.message_too_large


class CoordinatorLoadInProgressError(KafkaError):
    code = ErrorCode.coordinator_load_in_progress


class CoordinatorNotAvailableError(KafkaError):
    code = ErrorCode.coordinator_not_available


class NotCoordinatorError(KafkaError):
    code = ErrorCode.not_coordinator


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class RecordListTooLargeError(KafkaError):
    code = ErrorCode.record_list_too_large


class NotEnoughReplicasError(KafkaError):
    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(KafkaError):
    code = ErrorCode.not_enough_replicas_after_append


class InvalidRequiredAcksError(KafkaError):
    code = ErrorCode.invalid_required_acks


class TopicAuthorizationFailedError(KafkaError):
    code = ErrorCode.topic_authorization_failed


class ClusterAuthorizationFailedError(KafkaError):
    code = ErrorCode.cluster_authorization_failed


class InvalidTimestampError(KafkaError):
    code = ErrorCode.invalid_timestamp


class UnsupportedVersionError(KafkaError):
    """Also raised by the client itself when it and the broker share no version of an API."""

    code = ErrorCode.unsupported_version


class TopicAlreadyExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class InvalidConfigError(KafkaError):
    code = ErrorCode.invalid_config


class NotControllerError(KafkaError):
    code = ErrorCode.not_controller


class InvalidRequestError(KafkaError):
    code = ErrorCode.invalid_request


class PolicyViolationError(KafkaError):
    code = ErrorCode.policy_violation


class OutOfOrderSequenceNumberError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class DuplicateSequenceNumberError(KafkaError):
    code = ErrorCode.duplicate_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.invalid_txn_state


class InvalidProducerIdMappingError(KafkaError):
    code = ErrorCode.invalid_producer_id_mapping


class InvalidTransactionTimeoutError(KafkaError):
    code = ErrorCode.invalid_transaction_timeout


class ConcurrentTransactionsError(KafkaError):
    code = ErrorCode.concurrent_transactions


class KafkaStorageError(KafkaError):
    code = ErrorCode.kafka_storage_error


class UnknownProducerIdError(KafkaError):
    code = ErrorCode.unknown_producer_id


class TopicDeletionDisabledError(KafkaError):
    code = ErrorCode.topic_deletion_disabled


class FencedLeaderEpochError(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class UnsupportedCompressionTypeError(KafkaError):
    code = ErrorCode.unsupported_compression_type


class OffsetNotAvailableError(KafkaError):
    code = ErrorCode.offset_not_available


class InvalidRecordError(KafkaError):
    code = ErrorCode.invalid_record


class UnstableOffsetCommitError(KafkaError):
    code = ErrorCode.unstable_offset_commit


class ThrottlingQuotaExceededError(KafkaError):
    code = ErrorCode.throttling_quota_exceeded


class ProducerFencedError(KafkaError):
    code = ErrorCode.producer_fenced


class UnknownTopicIdError(KafkaError):
    code = ErrorCode.unknown_topic_id


class InconsistentTopicIdError(KafkaError):
    code = ErrorCode.inconsistent_topic_id


class TransactionAbortableError(KafkaError):
    code = ErrorCode.transaction_abortable


class TransactionalIdNotFoundError(KafkaError):
    code = ErrorCode.transactional_id_not_found


class UnsupportedSaslMechanismError(KafkaError):
    code = ErrorCode.unsupported_sasl_mechanism


class IllegalSaslStateError(KafkaError):
    code = ErrorCode.illegal_sasl_state


class SaslAuthenticationFailedError(KafkaError):
    """Wrong user name or password, or a server that could not prove it knows them: not
    retriable (the same credentials fail the same way)."""

    code = ErrorCode.sasl_authentication_failed


SaslAuthenticationError = SaslAuthenticationFailedError  # the name Kafka's Java client uses


# ---------------------------------------------------------------------------------------------
# The table: every error code → its class. Explicit classes above win; the rest are generated.


def class_name(code: ErrorCode) -> str:
    """UNKNOWN_TOPIC_OR_PARTITION → UnknownTopicOrPartitionError. The `_exception` suffix of
    a few codes (INVALID_TOPIC_EXCEPTION) is dropped so no name ends in ExceptionError."""
    name = code.name.removesuffix("_exception")
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


def _broker_error_classes() -> dict[ErrorCode, type[KafkaError]]:
    explicit: dict[ErrorCode, type[KafkaError]] = {}
    for candidate in list(globals().values()):
        if (
            isinstance(candidate, type)
            and issubclass(candidate, KafkaError)
            and candidate.__name__ == class_name(candidate.code)
        ):
            explicit[candidate.code] = candidate
    table: dict[ErrorCode, type[KafkaError]] = {}
    for code in ErrorCode:
        if code is ErrorCode.none:
            continue
        cls = explicit.get(code)
        if cls is None:
            cls = type(class_name(code), (KafkaError,), {"code": code, "__module__": __name__})
            globals()[cls.__name__] = cls
        table[code] = cls
    return table


_BY_CODE: dict[ErrorCode, type[KafkaError]] = _broker_error_classes()


def error_class(code: int | ErrorCode) -> type[KafkaError]:
    """The exception class for a code. A code this client does not know (from a newer
    broker) maps to UnknownServerError; error_for keeps the number in the message."""
    try:
        return _BY_CODE[ErrorCode(code)]
    except (ValueError, KeyError):
        return UnknownServerError


def error_for(code: int | ErrorCode, message: str | None = None, context: str = "") -> KafkaError:
    """The exception for an error code from a response. `context` names what failed
    (a topic, a partition) and `message` is the broker's error message, if any."""
    cls = error_class(code)
    known = cls is not UnknownServerError or int(code) == int(ErrorCode.unknown_server_error)
    parts = [part for part in (context, message or "") if part]
    if not known:
        parts.insert(0, f"error code {int(code)}")
    return cls(": ".join(parts))


def raise_for(code: int | ErrorCode, message: str | None = None, context: str = "") -> None:
    """Raises the exception for a non-zero error code; does nothing for NONE."""
    if int(code) != 0:
        raise error_for(code, message, context)
