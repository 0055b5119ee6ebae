"""A share consumer to be killed: `python -m tests.faults.share_victim BOOTSTRAP GROUP TOPIC`
joins GROUP, polls (explicit acknowledgement) until a poll hands it records, prints them as one
JSON line [[offset, delivery_count], ...] without acknowledging any, then waits to be killed
(kill -9) with them acquired. Give it the N records in one batch so that one poll holds them."""

from __future__ import annotations

import asyncio
import json
import sys
import time

from lockgate.client.share_consumer import ShareConsumer

DEADLINE_S = 30.0


async def main(bootstrap: str, group: str, topic: str) -> None:
    consumer = ShareConsumer(bootstrap, group_id=group, acknowledgement_mode="explicit")
    await consumer.start()
    consumer.subscribe([topic])
    held: list[tuple[int, int]] = []
    deadline = time.monotonic() + DEADLINE_S
    while not held and time.monotonic() < deadline:
        held = [(r.offset, r.delivery_count) for r in await consumer.poll(1000)]
    print(json.dumps(sorted(held)), flush=True)
    await asyncio.sleep(3600)  # killed here, holding the records


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
