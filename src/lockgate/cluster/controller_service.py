# The controller at work: one broker at a time (elected through the store) watches the live
# brokers and moves every partition to the state the pure decisions of cluster/controller.py
# give, by compare-and-swap that also names its controller term, so that a deposed
# controller's late decisions are refused by etcd itself. It reconciles the whole view after
# any change (a broker gone or back, a new topic, a write it lost to another writer), so a
# decision missed for any reason is taken at the next change.
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from lockgate.cluster.controller import on_brokers_changed
from lockgate.cluster.metadata import Change, Controller, MetadataStore

log = logging.getLogger(__name__)


class ControllerService:
    def __init__(
        self, store: MetadataStore, unclean_election: Callable[[str], bool] = lambda _: False
    ) -> None:
        self.store = store
        self.unclean_election = unclean_election
        self.term: Controller | None = None
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.store.view.listeners.append(self._on_change)
        self._task = asyncio.create_task(self._run(), name="controller")

    async def stop(self) -> None:
        self.store.view.listeners.remove(self._on_change)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.term = None

    def _on_change(self, change: Change) -> None:
        self._dirty.set()

    async def _run(self) -> None:
        while True:
            term = await self.store.campaign()
            self.term = term
            log.info("broker %d is the controller (epoch %d)", term.node_id, term.epoch)
            try:
                await self._serve(term)
            except Exception:
                log.exception("controller epoch %d failed; standing for election again",
                              term.epoch)  # fmt: skip
                await asyncio.sleep(0.5)
            finally:
                self.term = None

    async def _serve(self, term: Controller) -> None:
        self._dirty.set()
        while self.store.live and self.store.view.controller == term:
            self._dirty.clear()
            if not await self._reconcile(term):
                self._dirty.set()  # lost a race: decide again on the new view
                await asyncio.sleep(0.05)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):  # re-checks the term and lease now and then
                    await self._dirty.wait()
        log.info("broker %d is no longer the controller (epoch %d)", term.node_id, term.epoch)

    async def _reconcile(self, term: Controller) -> bool:
        """One pass over every partition; False if some write lost to another writer."""
        view = self.store.view
        alive = set(view.brokers)
        complete = True
        for (topic, index), current in list(view.partitions.items()):
            wanted = on_brokers_changed(current.value, alive, self.unclean_election(topic))
            if wanted is None or not self.store.live:
                continue
            written = await self.store.compare_and_set(
                topic, index, wanted, current.revision, controller_epoch=term.epoch
            )
            if written is None:
                complete = False
            else:
                log.info("%s-%d: %s (live brokers %s)", topic, index, wanted,
                         sorted(alive))  # fmt: skip
        return complete
