# Every Kafka error code has a named exception carrying the code and its retriable flag.
from __future__ import annotations

import pytest

from lockgate.client import errors
from lockgate.client.errors import ErrorCode, KafkaError, error_class, error_for, raise_for


def test_every_code_has_its_own_class() -> None:
    classes = {code: error_class(code) for code in ErrorCode if code is not ErrorCode.none}
    assert len(set(classes.values())) == len(classes)
    for code, cls in classes.items():
        assert issubclass(cls, KafkaError)
        assert cls.code is code
        assert cls.__name__ == errors.class_name(code)
        assert getattr(errors, cls.__name__) is cls


def test_names_follow_kafka_error_names() -> None:
    assert errors.class_name(ErrorCode.unknown_topic_or_partition) == "UnknownTopicOrPartitionError"
    assert errors.class_name(ErrorCode.invalid_topic_exception) == "InvalidTopicError"
    assert error_class(36) is errors.TopicAlreadyExistsError
    assert error_class(ErrorCode.fenced_leader_epoch) is errors.FencedLeaderEpochError


@pytest.mark.parametrize(
    ("code", "retriable"),
    [
        (ErrorCode.not_leader_or_follower, True),
        (ErrorCode.leader_not_available, True),
        (ErrorCode.unknown_topic_or_partition, True),
        (ErrorCode.topic_already_exists, False),
        (ErrorCode.invalid_config, False),
        (ErrorCode.producer_fenced, False),
    ],
)
def test_retriable_flag_comes_from_the_code(code: ErrorCode, retriable: bool) -> None:
    assert error_for(code).retriable is retriable


def test_message_names_the_code_the_context_and_the_broker_message() -> None:
    error = error_for(36, "Topic 'a' already exists.", "topic a")
    assert isinstance(error, errors.TopicAlreadyExistsError)
    assert str(error) == "TOPIC_ALREADY_EXISTS: topic a: Topic 'a' already exists."
    assert str(error_for(3)) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_an_unknown_code_keeps_its_number() -> None:
    error = error_for(9999, "from the future")
    assert isinstance(error, errors.UnknownServerError)
    assert "9999" in str(error)


def test_raise_for_ignores_none() -> None:
    raise_for(0)
    with pytest.raises(errors.InvalidPartitionsError):
        raise_for(37, "fewer than now")


def test_client_side_errors_reuse_kafka_codes() -> None:
    assert errors.KafkaConnectionError("x").retriable
    assert errors.KafkaTimeoutError("x").code is ErrorCode.request_timed_out
    assert errors.CorruptRecordError("x").code is ErrorCode.corrupt_message
