"""The timeout aborter awaits each abort's log write; requests for other transactional ids run
meanwhile. It must abort what each transaction holds when its turn comes, not what a snapshot
taken before the loop said: found by the fault runs, where a partition added implicitly
(Produce v12) during another id's abort never got its abort marker, and a later commit of the
same producer id made those records visible."""

from __future__ import annotations

import asyncio

from lockgate.client.producer import Producer
from lockgate.server.broker import Broker


async def test_a_partition_added_during_another_abort_is_aborted_too(
    memory_broker: Broker,
) -> None:
    bootstrap = f"127.0.0.1:{memory_broker.port}"
    memory_broker.topics.create("race", 2, 1, {})
    service = memory_broker.transactions
    first = Producer(bootstrap, transactional_id="race-a", transaction_timeout_ms=1_000)
    second = Producer(bootstrap, transactional_id="race-b", transaction_timeout_ms=1_000)
    async with first, second:
        for producer in (first, second):
            await producer.init_transactions()
            producer.begin_transaction()
            await (await producer.send("race", b"x", partition=0))
        identity = second.identity
        assert identity is not None
        await asyncio.sleep(1.2)  # both timed out

        original = service._append
        added: list[int] = []

        def append(meta: object, transactional_id: str) -> asyncio.Future[None]:
            future = original(meta, transactional_id)  # type: ignore[arg-type]
            if transactional_id == "race-a" and not added:
                # a produce of race-b arrives while race-a's abort is being logged
                error, _ = service.add_implicitly(
                    "race-b", identity.producer_id, identity.producer_epoch, ("race", 1)
                )
                added.append(error)
            return future

        service._append = append  # type: ignore[method-assign]
        try:
            assert await service.abort_timed_out() == 2
        finally:
            service._append = original  # type: ignore[method-assign]
        assert added == [0]
        assert ("race", 1) in service.txns["race-b"].partitions  # aborted with the rest
