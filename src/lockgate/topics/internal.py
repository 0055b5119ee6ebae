# The internal topics' names: the coordinators keep their state in them, the topic directory
# creates and protects them, and clients may not produce to them.
from __future__ import annotations

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
