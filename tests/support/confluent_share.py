# confluent-kafka's ShareConsumer (librdkafka's share consumer, a preview in 2.16) as a tested
# client of share groups: members in threads of their own (an instance is not thread-safe)
# acknowledge explicitly by the record's number, as franz-go's check does (franz_go.py): i%10 == 3
# is released on its first delivery and accepted after, i%10 == 7 rejected, the others accepted.
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer

DEADLINE_S = 45.0


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    deliveries: dict[int, int] = field(default_factory=dict)
    final: dict[int, bool] = field(default_factory=dict)  # accepted (True) or rejected
    counts: list[tuple[int, int]] = field(default_factory=list)  # (record, delivery count)
    after_final: int = 0
    members: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def decide(self, member: int, number: int, count: int) -> AcknowledgeType:
        with self.lock:
            self.deliveries[number] = self.deliveries.get(number, 0) + 1
            self.members[member] = self.members.get(member, 0) + 1
            self.counts.append((number, count))
            if number in self.final:
                self.after_final += 1
                return AcknowledgeType.ACCEPT
            if number % 10 == 7:
                self.final[number] = False
                return AcknowledgeType.REJECT
            if number % 10 == 3 and count == 1:
                return AcknowledgeType.RELEASE
            self.final[number] = True
            return AcknowledgeType.ACCEPT


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(topic, str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def consume(bootstrap: str, group: str, topic: str, records: int, consumers: int) -> Tally:
    """Runs `consumers` members until every record has its final answer (or the deadline)."""
    tally = Tally()
    done = threading.Event()
    deadline = time.monotonic() + DEADLINE_S

    def member(index: int) -> None:
        consumer = ShareConsumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "share.acknowledgement.mode": "explicit", "client.id": f"share-{index}",
        })  # fmt: skip
        try:
            consumer.subscribe([topic])
            while not done.is_set() and time.monotonic() < deadline:
                for message in consumer.poll(0.5):
                    if message.error() is not None:
                        with tally.lock:
                            tally.errors.append(str(message.error()))
                        continue
                    count, value = message.delivery_count(), message.value()
                    if count is None or value is None:
                        with tally.lock:
                            tally.errors.append(f"not a share record: {message.offset()}")
                        continue
                    decision = tally.decide(index, int(value), count)
                    consumer.acknowledge(message, decision)
                consumer.commit_sync(10)
                with tally.lock:
                    if len(tally.final) >= records:
                        done.set()
        except KafkaException as exc:
            with tally.lock:
                tally.errors.append(f"member {index}: {exc}")
        finally:
            consumer.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S + 30)
    return tally


def check(tally: Tally, records: int, consumers: int) -> None:
    """Every record answered for good once, released ones again with delivery count 2,
    rejected ones never again, delivery counts that count the deliveries."""
    assert tally.errors == [], tally.errors
    assert len(tally.final) == records, sorted(set(range(records)) - set(tally.final))
    released = [i for i in range(records) if i % 10 == 3]
    assert sorted(i for i, accepted in tally.final.items() if not accepted) == [
        i for i in range(records) if i % 10 == 7
    ]
    assert tally.after_final == 0, tally.counts
    assert all(tally.deliveries[i] == 2 for i in released), tally.deliveries
    assert sum(tally.deliveries.values()) == records + len(released)
    seen: dict[int, int] = {}
    for number, count in tally.counts:  # each delivery's count is the deliveries so far
        seen[number] = seen.get(number, 0) + 1
        assert count == seen[number], (number, count, seen[number])
    assert len(tally.members) <= consumers


def names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:10]
    return f"ck-share-{suffix}", f"ck-share-group-{suffix}"
