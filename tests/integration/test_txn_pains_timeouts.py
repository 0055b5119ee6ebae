"""Issue 22, pains 1-4 against lockgate, each triggered for real and each checked in the log
with a read_committed consumer (every record the application saw committed is there once,
nothing of an aborted transaction is):

1. a transaction left open by a producer that was SIGKILLed pins the last stable offset until
   the coordinator aborts it after its timeout, or at once when the same transactional id
   comes back;
2. an idle producer whose producer id expired goes on after an abortable error; one whose
   transactional id expired is told so (fatal, as it cannot know it was not fenced before);
3. a transaction that outlived its timeout is reported as TransactionTimedOutError (abortable,
   the same producer goes on), while a real second instance still fences the first;
4. commit/init/send_offsets calls that timed out (broker frozen with SIGSTOP) are called again
   and take effect once; a delivery timeout inside a transaction makes it abortable.

The reference broker runs the broker-side parts in tests/reference/test_txn_pains.py."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from lockgate.client.admin import Admin
from lockgate.client.cluster import TopicPartition
from lockgate.client.errors import (
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionalIdNotFoundError,
    UnknownProducerIdError,
)
from lockgate.client.producer import Producer
from lockgate.client.transactions import (
    ProducerIdExpiredError,
    TransactionState,
    TransactionTimedOutError,
)
from lockgate.protocol.errors import ErrorCode
from lockgate.protocol.records import build_batch
from lockgate.server.broker import Broker
from tests.integration.test_client_producer import (
    bootstrap,
    read,
    unique,
    until_producers_forgotten,
)
from tests.integration.test_client_producer import start_broker as start_memory_broker
from tests.support.broker import BrokerProcess
from tests.support.clients import create_topic
from tests.support.kafka_wire import KafkaWire, produce

WAIT = 20.0  # an upper bound for anything below; nothing waits this long when all is well
FAST_TIMEOUTS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "100",
}
TRANSACTIONAL_ATTRIBUTE = 0x10  # record batch attributes bit 4


async def start_broker(settings: dict[str, str]) -> Broker:
    return await start_memory_broker({**FAST_TIMEOUTS, **settings})


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    instance = await start_broker({})
    try:
        yield instance
    finally:
        await instance.stop()


def committed(bootstrap: str, topic: str, expected: int, settle: float = 0.3) -> list[bytes]:
    """Values a read_committed consumer reads from partition 0: until `expected` came, then
    `settle` seconds more to catch anything extra."""
    records = read(bootstrap, topic, 1, expected, settle=settle)
    return [value or b"" for _partition, _key, value in records]


def stable_offset(bootstrap: str, topic: str) -> int:
    """The last stable offset of partition 0, as a read_committed consumer asks for it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("lso"),
            "isolation.level": "read_committed",
        }
    )
    try:
        _low, high = consumer.get_watermark_offsets(
            ConfluentTopicPartition(topic, 0), timeout=10, cached=False
        )
        return int(high)
    finally:
        consumer.close()


async def wait_until(condition: object, what: str, timeout: float = WAIT) -> float:
    """Polls `condition()` (sync, run in a thread) until true; returns the seconds it took."""
    start = time.monotonic()
    while True:
        if await asyncio.to_thread(condition):  # type: ignore[arg-type]
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, f"{what} within {timeout} s"
        await asyncio.sleep(0.05)


async def commit_values(producer: Producer, topic: str, *values: bytes) -> None:
    producer.begin_transaction()
    for value in values:
        await producer.send(topic, value, partition=0)
    await producer.commit_transaction()


# -- pain 1: a hanging transaction pins the last stable offset ---------------------------------

HANGING_PRODUCER = """
import asyncio, sys
from lockgate.client.producer import Producer

async def main(bootstrap, topic, transactional_id, timeout_ms):
    producer = Producer(
        bootstrap, transactional_id=transactional_id, transaction_timeout_ms=timeout_ms,
        linger_ms=0,
    )
    await producer.start()
    await producer.init_transactions()
    producer.begin_transaction()
    await producer.send(topic, b"committed-before", partition=0)
    await producer.commit_transaction()
    producer.begin_transaction()
    for i in range(3):
        await (await producer.send(topic, b"hanging-%d" % i, partition=0))
    print("sent", flush=True)
    await asyncio.sleep(3600)  # killed long before

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


def run_and_kill_producer(
    bootstrap: str, topic: str, transactional_id: str, timeout_ms: int
) -> None:
    """A producer in a child process commits one record, writes three more in a transaction,
    and is SIGKILLed with that transaction open."""
    child = subprocess.Popen(
        [sys.executable, "-c", HANGING_PRODUCER, bootstrap, topic, transactional_id,
         str(timeout_ms)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # bounded: the child exits on failure, closing stdout
        assert line.strip() == b"sent", line + child.stdout.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)


# Long enough for the child to write its three records and for the pinned offset to be read
# before the coordinator aborts, on a busy machine: with 1 s a loaded CI run saw the timeout
# fire while the child was still writing (INVALID_PRODUCER_ID_MAPPING on Kafka).
HANGING_TIMEOUT_MS = 5_000


async def hanging_transaction_is_aborted_by_its_timeout(bootstrap: str, topic: str) -> None:
    """Shared with the reference module: the coordinator aborts the dead producer's
    transaction after transaction.timeout.ms and the last stable offset moves on."""
    await asyncio.to_thread(
        run_and_kill_producer, bootstrap, topic, unique("dies"), HANGING_TIMEOUT_MS
    )
    pinned = await asyncio.to_thread(stable_offset, bootstrap, topic)
    assert pinned == 2, "the committed record and its marker; the open transaction pins the rest"
    await wait_until(
        lambda: stable_offset(bootstrap, topic) > pinned, "the timeout aborts the transaction"
    )
    async with Producer(bootstrap, transactional_id=unique("after"), linger_ms=0) as later:
        await later.init_transactions()
        await commit_values(later, topic, b"committed-after")
    assert await asyncio.to_thread(committed, bootstrap, topic, 2) == [
        b"committed-before",
        b"committed-after",
    ]


async def restarted_producer_aborts_the_hanging_transaction(bootstrap: str, topic: str) -> None:
    """Shared with the reference module: with a long timeout the transaction would pin the
    last stable offset for a minute; the same transactional id coming back aborts it in
    init_transactions."""
    transactional_id = unique("restarts")
    await asyncio.to_thread(run_and_kill_producer, bootstrap, topic, transactional_id, 60_000)
    pinned = await asyncio.to_thread(stable_offset, bootstrap, topic)
    await asyncio.sleep(1.0)
    assert await asyncio.to_thread(stable_offset, bootstrap, topic) == pinned
    async with Producer(bootstrap, transactional_id=transactional_id, linger_ms=0) as restarted:
        started = time.monotonic()
        await restarted.init_transactions()
        assert time.monotonic() - started < 10, "aborted at once, not after the 60 s timeout"
        assert await asyncio.to_thread(stable_offset, bootstrap, topic) > pinned
        await commit_values(restarted, topic, b"committed-after")
    assert await asyncio.to_thread(committed, bootstrap, topic, 2) == [
        b"committed-before",
        b"committed-after",
    ]


async def unadded_partition_is_refused(bootstrap: str, topic: str) -> None:
    """Shared with the reference module: Kafka's hanging transaction proper (KAFKA-12671) is a
    transactional batch on a partition the coordinator never added, which no timeout ever
    aborts. With the partition check (KIP-890 part 1) the leader refuses such a batch: here a
    raw classic-protocol Produce of the producer's own id and epoch to partition 1, which its
    transaction never added; partition 1's last stable offset stays free."""
    async with Producer(
        bootstrap, transactional_id=unique("checked"), transaction_version=1, linger_ms=0
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"added", partition=0))
        identity = producer.identity
        assert identity is not None
        batch = build_batch(
            [(None, b"never-added")],
            attributes=TRANSACTIONAL_ATTRIBUTE,
            producer_id=identity.producer_id,
            producer_epoch=identity.producer_epoch,
            base_sequence=0,
        )

        def produce_unadded() -> int:
            with KafkaWire(bootstrap) as wire:
                result = produce(
                    wire, 9, topic, {1: batch}, transactional_id=producer.transactional_id
                )
            return result.topics[topic][0].error_code

        error = await asyncio.to_thread(produce_unadded)
        assert error == ErrorCode.invalid_txn_state  # TRANSACTION_ABORTABLE before Produce v11
        await producer.commit_transaction()
    assert await asyncio.to_thread(committed, bootstrap, topic, 1) == [b"added"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("lso")})
    try:
        low, high = await asyncio.to_thread(
            consumer.get_watermark_offsets, ConfluentTopicPartition(topic, 1), 10, False
        )
        assert (low, high) == (0, 0), "nothing was appended to partition 1"
    finally:
        consumer.close()


async def test_a_partition_never_added_to_the_transaction_is_refused(broker: Broker) -> None:
    topic = unique("unadded")
    broker.topics.create(topic, 2, 1, {})
    await unadded_partition_is_refused(bootstrap(broker), topic)


async def test_a_killed_producer_s_transaction_is_aborted_after_its_timeout(broker: Broker) -> None:
    broker.topics.create("hanging-timeout", 1, 1, {})
    await hanging_transaction_is_aborted_by_its_timeout(bootstrap(broker), "hanging-timeout")


async def test_a_restarted_producer_aborts_the_hanging_transaction_at_once(broker: Broker) -> None:
    broker.topics.create("hanging-restart", 1, 1, {})
    await restarted_producer_aborts_the_hanging_transaction(bootstrap(broker), "hanging-restart")


# -- pain 2: idle producers whose ids expired -------------------------------------------------


async def forgotten(admin: Admin, transactional_id: str) -> bool:
    try:
        await admin.describe_transactions([transactional_id])
    except TransactionalIdNotFoundError:
        return True
    return False


async def expired_transactional_id_is_reported(
    bootstrap: str, topic: str, version: int | None
) -> None:
    """Shared with the reference module (the broker expires idle ids quickly): the producer
    whose id expired fails its next transaction with ProducerIdExpiredError (fatal: it cannot
    know whether a newer instance had fenced it), nothing of that transaction is visible, and
    a new producer with the same id goes on."""
    transactional_id = unique("idle")
    async with (
        Producer(
            bootstrap, transactional_id=transactional_id, transaction_version=version, linger_ms=0
        ) as producer,
        Admin(bootstrap) as admin,
    ):
        await producer.init_transactions()
        await commit_values(producer, topic, b"before")
        deadline = time.monotonic() + WAIT
        while not await forgotten(admin, transactional_id):
            assert time.monotonic() < deadline, "the idle transactional id did not expire"
            await asyncio.sleep(0.1)

        producer.begin_transaction()
        pending = await producer.send(topic, b"lost-attempt", partition=0)
        with pytest.raises(ProducerIdExpiredError, match=r"transactional\.id\.expiration\.ms"):
            await producer.commit_transaction()
        assert producer.transaction_state is TransactionState.FATAL_ERROR
        with pytest.raises(KafkaError):
            await pending
    async with Producer(
        bootstrap, transactional_id=transactional_id, transaction_version=version, linger_ms=0
    ) as fresh:
        await fresh.init_transactions()
        await commit_values(fresh, topic, b"after")
    assert await asyncio.to_thread(committed, bootstrap, topic, 2) == [b"before", b"after"]


@pytest.mark.parametrize("version", [1, 2])
async def test_an_expired_transactional_id_is_reported_as_such(
    version: int,
) -> None:
    broker = await start_broker({"transactional.id.expiration.ms": "500"})
    try:
        topic = unique("expired-id")
        broker.topics.create(topic, 1, 1, {})
        await expired_transactional_id_is_reported(bootstrap(broker), topic, version)
    finally:
        await broker.stop()


async def test_an_expired_producer_id_is_bumped_after_an_abortable_error(
    forgetful_broker: Broker,
) -> None:
    """Classic protocol, where sequences run on across transactions: the partition forgot the
    idle producer (producer.id.expiration.ms), its next batch gets UNKNOWN_PRODUCER_ID, the
    transaction is abortable, and the abort bumps the epoch (KIP-360) for the next one."""
    topic = unique("expired-producer")
    forgetful_broker.topics.create(topic, 1, 1, {})
    async with Producer(
        bootstrap(forgetful_broker),
        transactional_id=unique("idle"),
        transaction_version=1,
        linger_ms=0,
    ) as producer:
        await producer.init_transactions()
        await commit_values(producer, topic, b"before")
        before = producer.identity
        await until_producers_forgotten(forgetful_broker, topic)
        producer.begin_transaction()
        pending = await producer.send(topic, b"lost-attempt", partition=0)
        with pytest.raises(UnknownProducerIdError):
            await producer.commit_transaction()
        assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(UnknownProducerIdError):
            await pending
        await producer.abort_transaction()
        assert producer.identity != before and producer.stats.epoch_bumps == 1
        await commit_values(producer, topic, b"after")
    assert await asyncio.to_thread(committed, bootstrap(forgetful_broker), topic, 2) == [
        b"before",
        b"after",
    ]


# -- pain 3: ProducerFenced with a single producer --------------------------------------------


async def timed_out_transaction_is_abortable(
    bootstrap: str, topic: str, version: int | None, timeout_error: type[Exception]
) -> None:
    """Shared with the reference module: a transaction outlives transaction_timeout_ms, the
    coordinator aborts it; the producer learns it from commit_transaction (`timeout_error`),
    aborts, and (when that error is abortable) goes on with the same instance."""
    async with Producer(
        bootstrap,
        transactional_id=unique("slow"),
        transaction_version=version,
        transaction_timeout_ms=300,
        linger_ms=0,
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"too-slow", partition=0))
        await asyncio.sleep(0.8)  # the coordinator aborts it meanwhile
        with pytest.raises(timeout_error):
            await producer.commit_transaction()
        if timeout_error is ProducerFencedError:  # the broker cannot tell: fatal
            assert producer.transaction_state is TransactionState.FATAL_ERROR
        else:
            assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
            await producer.abort_transaction()
            await commit_values(producer, topic, b"next")
            await commit_values(producer, topic, b"and-the-next")
    expected = [] if timeout_error is ProducerFencedError else [b"next", b"and-the-next"]
    assert await asyncio.to_thread(committed, bootstrap, topic, len(expected)) == expected


async def second_instance_still_fences(bootstrap: str, topic: str, version: int | None) -> None:
    """Shared with the reference module: the first instance's transaction times out, then a
    second instance starts one of its own; the first learns it is fenced (fatal) and its
    attempt to find out must not disturb the second's open transaction."""
    transactional_id = unique("twice")
    first = Producer(
        bootstrap,
        transactional_id=transactional_id,
        transaction_version=version,
        transaction_timeout_ms=300,
        linger_ms=0,
    )
    second = Producer(
        bootstrap, transactional_id=transactional_id, transaction_version=version, linger_ms=0
    )
    async with first, second:
        await first.init_transactions()
        first.begin_transaction()
        await (await first.send(topic, b"zombie", partition=0))
        await asyncio.sleep(0.8)  # timed out and aborted
        await second.init_transactions()
        second.begin_transaction()
        await (await second.send(topic, b"live", partition=0))
        with pytest.raises(ProducerFencedError):
            await first.commit_transaction()
        with pytest.raises(ProducerFencedError):
            await first.abort_transaction()
        await second.commit_transaction()  # untouched by the first one's attempts
    assert await asyncio.to_thread(committed, bootstrap, topic, 1) == [b"live"]


@pytest.mark.parametrize("version", [1, 2])
async def test_a_timed_out_transaction_is_abortable_not_fenced(
    broker: Broker, version: int
) -> None:
    topic = unique("timed-out")
    broker.topics.create(topic, 1, 1, {})
    await timed_out_transaction_is_abortable(
        bootstrap(broker), topic, version, TransactionTimedOutError
    )


@pytest.mark.parametrize("version", [1, 2])
async def test_a_real_second_instance_is_still_fenced(broker: Broker, version: int) -> None:
    topic = unique("second")
    broker.topics.create(topic, 1, 1, {})
    await second_instance_still_fences(bootstrap(broker), topic, version)


@pytest.mark.parametrize("version", [1, 2])
async def test_offsets_sent_after_the_timeout_are_abortable_too(
    broker: Broker, version: int
) -> None:
    topic = unique("offsets-timed-out")
    broker.topics.create(topic, 1, 1, {})
    async with Producer(
        bootstrap(broker),
        transactional_id=unique("slow-offsets"),
        transaction_version=version,
        transaction_timeout_ms=300,
        linger_ms=0,
    ) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"too-slow", partition=0))
        await asyncio.sleep(0.8)
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            await producer.send_offsets_to_transaction(
                {TopicPartition(topic, 0): 1}, unique("group")
            )
        await producer.abort_transaction()  # settles it: a timeout
        await commit_values(producer, topic, b"next")
    assert await asyncio.to_thread(committed, bootstrap(broker), topic, 1) == [b"next"]


def librdkafka_timed_out_transaction(bootstrap: str, topic: str) -> KafkaException:
    """The pain as librdkafka shows it: its transaction outlives transaction.timeout.ms and
    the commit fails with a fatal "fenced" error, although no other instance exists."""
    producer = ConfluentProducer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique("librdkafka"),
            "transaction.timeout.ms": 1000,
            "message.timeout.ms": 1000,
        }
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"too-slow", partition=0)
    producer.flush(10)
    time.sleep(1.5)  # the coordinator aborts it meanwhile
    try:
        producer.commit_transaction(10)
    except KafkaException as exc:
        return exc
    raise AssertionError("the commit of a timed-out transaction succeeded")


async def test_librdkafka_goes_fatal_where_lockgate_s_client_goes_on(broker: Broker) -> None:
    topic = unique("librdkafka")
    broker.topics.create(topic, 1, 1, {})
    raised = await asyncio.to_thread(librdkafka_timed_out_transaction, bootstrap(broker), topic)
    assert raised.args[0].fatal(), raised
    assert "fenced" in str(raised).lower()
    assert await asyncio.to_thread(committed, bootstrap(broker), topic, 0) == []


# -- pain 4: a timeout leaves the producer unrecoverable --------------------------------------


@pytest.fixture(scope="module")
def frozen_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker in a child process, frozen with SIGSTOP by the tests and resumed."""
    broker = BrokerProcess(tmp_path_factory.mktemp("frozen") / "data").start()
    try:
        yield broker
    finally:
        broker.resume()
        broker.kill()


def frozen_producer(broker: BrokerProcess, **options: object) -> Producer:
    return Producer(
        broker.bootstrap,
        transactional_id=unique("frozen"),
        request_timeout_ms=1_000,
        retry_backoff_ms=50,
        linger_ms=0,
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("ending", "state", "timeout_ms", "expected"),
    [
        ("commit", TransactionState.COMMITTING, 1_500, [b"once", b"next"]),
        ("abort", TransactionState.ABORTING, 1_000, [b"next"]),
    ],
)
async def test_a_commit_or_abort_that_timed_out_is_called_again_and_ends_once(
    frozen_broker: BrokerProcess,
    ending: str,
    state: TransactionState,
    timeout_ms: int,
    expected: list[bytes],
) -> None:
    topic = unique(f"{ending}-again")
    await asyncio.to_thread(create_topic, frozen_broker.bootstrap, topic, 1)
    async with frozen_producer(frozen_broker) as producer:
        end = getattr(producer, f"{ending}_transaction")
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"once", partition=0))
        with frozen_broker.paused():
            with pytest.raises(KafkaTimeoutError):
                await end(timeout_ms=timeout_ms)
            assert producer.transaction_state is state
        await end()  # the same call again: the transaction ends once
        await commit_values(producer, topic, b"next")
    assert (
        await asyncio.to_thread(committed, frozen_broker.bootstrap, topic, len(expected))
        == expected
    )


async def test_init_and_send_offsets_that_timed_out_are_called_again(
    frozen_broker: BrokerProcess,
) -> None:
    topic = unique("init-again")
    await asyncio.to_thread(create_topic, frozen_broker.bootstrap, topic, 1)
    group = unique("group")
    async with frozen_producer(frozen_broker) as producer:
        with frozen_broker.paused(), pytest.raises(KafkaTimeoutError):
            await producer.init_transactions(timeout_ms=1_500)
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(topic, b"with-offsets", partition=0)
        with frozen_broker.paused(), pytest.raises(KafkaTimeoutError):
            await producer.send_offsets_to_transaction(
                {TopicPartition(topic, 0): 7}, group, timeout_ms=1_500
            )
        await producer.send_offsets_to_transaction({TopicPartition(topic, 0): 7}, group)
        await producer.commit_transaction()
    assert await asyncio.to_thread(committed, frozen_broker.bootstrap, topic, 1) == [
        b"with-offsets"
    ]
    consumer = Consumer({"bootstrap.servers": frozen_broker.bootstrap, "group.id": group})
    try:
        [position] = await asyncio.to_thread(
            consumer.committed, [ConfluentTopicPartition(topic, 0)], 10
        )
        assert position.offset == 7
    finally:
        consumer.close()


async def test_a_delivery_timeout_makes_the_transaction_abortable(
    frozen_broker: BrokerProcess,
) -> None:
    """Records that outlived delivery_timeout_ms while the broker was frozen may still land
    when it resumes: committing the rest of the transaction would lose them, so the commit
    fails (abortable) and the application redoes the whole transaction."""
    topic = unique("delivery-timeout")
    await asyncio.to_thread(create_topic, frozen_broker.bootstrap, topic, 1)
    async with frozen_producer(frozen_broker, delivery_timeout_ms=1_500) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await (await producer.send(topic, b"a", partition=0))
        with frozen_broker.paused():
            late = await producer.send(topic, b"b", partition=0)
            with pytest.raises(KafkaTimeoutError):
                await asyncio.wait_for(late, WAIT)
        with pytest.raises(TransactionAbortableError):
            await producer.commit_transaction()
        await producer.abort_transaction()
        await commit_values(producer, topic, b"a", b"b")
    assert await asyncio.to_thread(committed, frozen_broker.bootstrap, topic, 2) == [b"a", b"b"]
