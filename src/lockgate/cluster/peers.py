# Connections from this broker to the other brokers of its cluster, one per broker, for one
# purpose each (markers, transaction verification): kept between calls while they work and
# the broker keeps its registered address (a restarted broker may come back elsewhere). The
# registered address is the peer's inter-broker listener, secured as this broker's own
# inter-broker settings say.
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from lockgate.client.connection import BrokerConnection
from lockgate.client.errors import KafkaError
from lockgate.client.security import ClientSecurity
from lockgate.cluster.metadata import BrokerRegistration


class _Registered(Protocol):
    """The brokers registered in the cluster (cluster/membership.py's Membership)."""

    def brokers(self) -> Iterable[BrokerRegistration]: ...


class PeerConnections:
    def __init__(
        self,
        membership: _Registered,
        security: ClientSecurity | None,
        client_id: str,
        request_timeout_ms: int,
    ) -> None:
        self.membership = membership
        self.security = security  # this broker's inter-broker settings (None: plaintext)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    async def get(self, node_id: int) -> BrokerConnection:
        """The connection to the broker's registered address, opened if needed. Raises
        KafkaError (not registered, cannot connect) or OSError."""
        registration = next((b for b in self.membership.brokers() if b.node_id == node_id), None)
        if registration is None:
            raise KafkaError(f"broker {node_id} is not registered")
        async with self._connecting.setdefault(node_id, asyncio.Lock()):
            current = self._connections.get(node_id)
            address = (registration.host, registration.port)
            if current is not None:
                if current.connected and (current.host, current.port) == address:
                    return current
                del self._connections[node_id]
                await current.close()
            connection = BrokerConnection(
                registration.host,
                registration.port,
                node_id=node_id,
                client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms,
                security=self.security,
            )
            await connection.connect()
            self._connections[node_id] = connection
            return connection

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()
