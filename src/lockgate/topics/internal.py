# The internal topics' names: the coordinators keep their state in them, the topic directory
# creates and protects them, and clients may not produce to them.
from __future__ import annotations

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
# the share coordinator's (KIP-932): not compacted but pruned below the records still needed
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
