# Kafka error codes (re-exported from kio) and the exception the broker raises to answer one.
from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaProtocolError"]


class KafkaProtocolError(Exception):
    """Raised inside the broker to answer a request (or one partition of it) with an error code."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message
