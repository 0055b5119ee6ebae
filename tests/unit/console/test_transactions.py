"""console/transactions.py: the paginated list with states, ages and partitions; a two-phase
(KIP-939) transaction prepared and held past its timeout, told apart from the ordinary ones;
force-terminate; and, against a broker in a child process whose coordinator lost its log, a
hanging transaction found over every partition and aborted by its start offset."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.producer import Producer
from lockgate.console import transactions
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.unit.console.in_process_broker import bootstrap, running_broker

TOPIC = "console-transactions"


async def wait_for_state(admin: Admin, transactional_id: str, states: set[str]) -> str:
    deadline = time.monotonic() + 20
    while True:
        state = (await transactions.describe_transaction(admin, transactional_id)).state
        if state in states or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.05)


async def test_list_held_two_phase_and_force_terminate() -> None:
    async with running_broker() as broker, Admin(bootstrap(broker)) as admin:
        await admin.create_topic(TOPIC, 2)
        address = bootstrap(broker)
        for transactional_id, commit in (("txn-committed", True), ("txn-aborted", False)):
            async with Producer(address, transactional_id=transactional_id) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send(TOPIC, b"v", partition=0)
                await producer.flush()  # the partition joins the transaction
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        held = Producer(address, transactional_id="txn-2pc", transaction_timeout_ms=1_000)
        await held.start()
        await held.init_transactions(enable_2pc=True)
        held.begin_transaction()
        await held.send(TOPIC, b"prepared", partition=0)
        await held.send(TOPIC, b"prepared", partition=1)
        await held.prepare_transaction()
        await held.close()  # the external manager keeps the decision to itself
        async with Producer(address, transactional_id="txn-open") as open_one:
            await open_one.init_transactions()
            open_one.begin_transaction()
            await open_one.send(TOPIC, b"open", partition=1)
            await open_one.flush()
            started = int(time.time() * 1000)

            page = await transactions.list_transactions(admin)
            rows = {row.transactional_id: row for row in page.rows}
            assert sorted(rows) == ["txn-2pc", "txn-aborted", "txn-committed", "txn-open"]
            assert rows["txn-committed"].state == "CompleteCommit"
            assert rows["txn-aborted"].state == "CompleteAbort"
            assert not rows["txn-committed"].open and rows["txn-committed"].age_ms is None
            two_phase = rows["txn-2pc"]
            assert two_phase.state == "Ongoing" and two_phase.timeout_ms == 1_000
            assert two_phase.partitions == (TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1))
            assert two_phase.age_ms is not None and two_phase.age_ms >= 0
            assert rows["txn-open"].timeout_ms == 60_000

            ongoing = await transactions.list_transactions(
                admin, name_filter="TXN-", state_filter="Ongoing", page_size=1, page=2
            )
            assert (ongoing.matching, ongoing.pages, ongoing.total) == (2, 2, 4)
            assert [row.transactional_id for row in ongoing.rows] == ["txn-open"]

            # Seen from two seconds on, the prepared one has waited past its 1 s timeout and
            # the timeout task has left it alone: only a two-phase transaction does that.
            later = await transactions.held_past_timeout(admin, now_ms=started + 2_000)
            assert [row.transactional_id for row in later] == ["txn-2pc"]
            assert later[0].past_timeout and later[0].age_ms is not None
            assert later[0].age_ms >= 2_000

            await transactions.force_terminate(admin, "txn-2pc", timeout_ms=10_000)
            assert await wait_for_state(admin, "txn-2pc", {"Empty", "CompleteAbort"}) in (
                "Empty",
                "CompleteAbort",
            )
            assert await transactions.held_past_timeout(admin, now_ms=started + 2_000) == ()
            await open_one.commit_transaction()


async def test_hanging_transaction_found_and_aborted(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(broker.bootstrap, TOPIC, 2)
        async with Producer(broker.bootstrap, transactional_id="lost") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send(TOPIC, b"lost", partition=1)
            await producer.flush()
            producer_id = producer.identity.producer_id  # type: ignore[union-attr]
            broker.kill()  # the transaction is open on partition 1 ...
        for lost in (tmp_path / "data").glob("__transaction_state-*"):
            shutil.rmtree(lost)  # ... and its coordinator's log is gone
        broker.start()

        async with Admin(broker.bootstrap) as admin:
            young = await transactions.find_hanging(admin)
            assert young.hanging == () and young.topic is None
            assert young.partitions_scanned == 2  # every partition, internal topics left out

            scan = await transactions.find_hanging(admin, max_transaction_timeout_ms=0)
            (hanging,) = scan.hanging
            assert hanging.topic_partition == TopicPartition(TOPIC, 1)
            assert hanging.producer.producer_id == producer_id
            assert hanging.producer.current_txn_start_offset == 0
            assert "no coordinator knows" in hanging.reason

            aborted = await transactions.abort_hanging(admin, TopicPartition(TOPIC, 1), 0)
            assert aborted.producer_id == producer_id
            after = await transactions.find_hanging(
                admin, topic=TOPIC, max_transaction_timeout_ms=0
            )
            assert after.hanging == () and after.partitions_scanned == 2
    finally:
        broker.kill()
