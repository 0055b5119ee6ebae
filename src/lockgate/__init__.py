"""lockgate: a Kafka-wire-compatible streaming log built around exactly-once."""

__version__ = "0.1.0"
