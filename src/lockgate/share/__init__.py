"""The share-partition leader (KIP-932): the in-flight records of each (share group,
topic-partition) this broker leads, the share sessions of its consumers, and what ShareFetch
and ShareAcknowledge call.

It is its own layer, between the handlers and the coordinators: like the log, it belongs to a
partition's leader (not to a coordinator, which owns a key on an internal topic), and it calls
the share coordinator only through the persister (coordinator/share/persister.py)."""
