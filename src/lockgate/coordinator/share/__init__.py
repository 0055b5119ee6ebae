"""The share coordinator (KIP-932): share-partition state in __share_group_state."""
