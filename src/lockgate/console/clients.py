# console/clients.py — the console's one connection to the cluster: a Cluster (bootstrap,
# metadata, one connection per broker) started on first use and shared by every request's
# Admin and Consumer, so that a page view costs its own round trips and no connection set-up.
# A cluster that cannot be reached fails the request (the page says so) and the next request
# tries again from scratch.
from __future__ import annotations

import asyncio

from lockgate.client.admin import Admin
from lockgate.client.cluster import Cluster
from lockgate.console.settings import ConsoleSettings

# A page should say "cannot reach the cluster" within seconds, not after the client's 20
# metadata retries meant for producers riding out a leader election.
METADATA_RETRIES = 3
CONNECT_TIMEOUT_MS = 5_000


class ConsoleClients:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._cluster: Cluster | None = None
        self._lock = asyncio.Lock()

    async def cluster(self) -> Cluster:
        async with self._lock:
            if self._cluster is None:
                cluster = Cluster(
                    self.settings.bootstrap_servers,
                    client_id=self.settings.client_id,
                    request_timeout_ms=self.settings.request_timeout_ms,
                    connect_timeout_ms=CONNECT_TIMEOUT_MS,
                    metadata_retries=METADATA_RETRIES,
                    security=self.settings.security,
                )
                try:
                    await cluster.start()
                except BaseException:
                    await cluster.close()
                    raise
                self._cluster = cluster
            return self._cluster

    async def admin(self) -> Admin:
        """An Admin over the shared cluster (cheap: it owns nothing to start or close)."""
        return Admin(cluster=await self.cluster())

    async def close(self) -> None:
        async with self._lock:
            if self._cluster is not None:
                await self._cluster.close()
                self._cluster = None
