# The cyclic garbage collector and a broker's long-lived objects. CPython's full collection
# walks every tracked object with the event loop held: a broker with 10,000 partitions has
# ~450,000, a pass of 100-360 ms on this machine, run whenever the oldest generation has grown
# by a quarter (after a start, a large CreateTopics, a coordinator load).
#
# Rule: what survives a full collection is frozen (gc.freeze: moved out of the collector's
# generations, O(1)), and so is everything at the end of a start, so that the next full pass
# walks only what was made since. When a full pass ends the younger generations are empty,
# so only objects alive then are frozen. One of them that later becomes cyclic garbage is
# reclaimed only after an unfreeze: every UNFREEZE_EVERY_S the frozen objects go back to the
# oldest generation, at the price of one full pass over them then.
from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

UNFREEZE_EVERY_S = 3600.0


class HeapKeeper:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        unfreeze_every_s: float = UNFREEZE_EVERY_S,
    ) -> None:
        self.clock = clock
        self.unfreeze_every_s = unfreeze_every_s
        self._unfrozen_at = clock()
        self._running = False

    def start(self) -> None:
        """Freezes what the start made, then what survives each full collection."""
        if self._running:
            return
        self._running = True
        self._unfrozen_at = self.clock()
        self.settle()
        gc.callbacks.append(self._after_collection)

    def settle(self) -> None:
        """Freezes what exists now (the young generations collected first, cheaply, so their
        garbage is not frozen): after a burst of long-lived objects, such as the logs a start
        opens behind its first answers."""
        if self._running:
            gc.collect(1)
            gc.freeze()

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        gc.callbacks.remove(self._after_collection)
        gc.unfreeze()

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info["generation"] != 2:
            return
        now = self.clock()
        if now - self._unfrozen_at >= self.unfreeze_every_s:
            self._unfrozen_at = now
            frozen = gc.get_freeze_count()
            gc.unfreeze()  # the next full pass looks at them all again, garbage cycles included
            log.debug("unfroze %d objects", frozen)
        else:
            gc.freeze()
