"""Mutation fuzzing of a live broker: `python -m tests.faults.fuzz [--frames 100000] [--seed N]`.

The corpus is real traffic: a scripted session of lockgate's client (admin, idempotent and
transactional produce, fetch, group membership and commits, transaction admin) is captured
frame by frame. Each fuzzed frame is a corpus frame mutated (bit flips, byte overwrites, extreme
integers, truncation, appended garbage, a wrong size prefix, another API key or version) and
sent on raw connections while a well-behaved idempotent producer and consumer run against the
same broker. A share of the connections go to a SASL_PLAINTEXT listener and run the SASL
exchange with random and mutated tokens (SaslHandshake v0/v1, SaslAuthenticate v0-2, raw
tokens after v0, requests out of order). The broker must never exit, must answer or close each
fuzzed connection, must still answer ApiVersions on a fresh connection throughout, and the
well-behaved client must read back exactly what it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from lockgate.client import connection as client_connection
from lockgate.client.admin import Admin, NewTopic
from lockgate.client.admin_scram import ScramUpsertion
from lockgate.client.cluster import TopicPartition
from lockgate.client.consumer import Consumer
from lockgate.client.producer import Producer
from lockgate.protocol.api import ApiKey, build, encode, is_flexible, request_class
from lockgate.security.scram import ScramClient, ScramMechanism, plain_token
from tests.support.broker import BrokerProcess

SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "connection.failed.authentication.delay.ms": "0",
}
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT")
SASL_SHARE = 0.2  # of the connections
SASL_USER, SASL_PASSWORD = "fuzz", "fuzz-password"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
FRAMES_PER_CONNECTION = 20
_SIZE = struct.Struct(">i")
EXTREMES = (0, -1, 1, 0x7F, 0x80, 0xFF, 0x7FFF, -0x8000, 0x7FFFFFFF, -0x80000000)


@contextmanager
def capturing() -> Iterator[list[bytes]]:
    """Records every request payload (header + body) lockgate's client writes."""
    frames: list[bytes] = []
    original = client_connection.BrokerConnection._write

    def write(
        self: client_connection.BrokerConnection,
        api_key: int,
        version: int,
        correlation_id: int,
        body: bytes,
    ) -> None:
        header = client_connection.encode_request_header(
            api_key,
            version,
            correlation_id,
            self.client_id,
            is_flexible(api_key, version),
        )
        frames.append(header + bytes(body))
        original(self, api_key, version, correlation_id, body)

    with mock.patch.object(client_connection.BrokerConnection, "_write", write):
        yield frames


async def capture_corpus(bootstrap: str) -> list[bytes]:
    with capturing() as frames:
        async with Admin(bootstrap) as admin:
            await admin.create_topics([NewTopic("corpus", num_partitions=2)])
            await admin.describe_configs("corpus")
            await admin.list_transactions()
        async with Producer(bootstrap) as producer:
            await producer.send_and_wait("corpus", b"value", b"key", headers=[("h", b"v")])
        async with Producer(bootstrap, transactional_id="corpus-txn") as txn:
            await txn.init_transactions()
            txn.begin_transaction()
            await txn.send("corpus", b"in-txn")
            await txn.send_offsets_to_transaction({TopicPartition("corpus", 0): 1}, "corpus-group")
            await txn.commit_transaction()
        async with Consumer(
            bootstrap, group_id="corpus-group", auto_offset_reset="earliest"
        ) as consumer:
            consumer.subscribe(["corpus"])
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not await consumer.poll(200):
                pass
            await consumer.commit()
        async with Admin(bootstrap) as admin:
            await admin.describe_groups(["corpus-group"])
            await admin.describe_producers([TopicPartition("corpus", 0)])
            await admin.describe_transactions(["corpus-txn"])
    return frames


def mutate(frame: bytes, rng: random.Random, corpus: list[bytes]) -> bytes:
    """One mutated frame, size prefix included (sometimes deliberately wrong)."""
    data = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        choice = rng.randrange(8)
        if choice == 0 and data:  # bit flips
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif choice == 1 and data:  # byte overwrite
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif choice == 2 and len(data) >= 4:  # an extreme int16/int32 somewhere
            position = rng.randrange(len(data) - 3)
            value = rng.choice(EXTREMES)
            if rng.random() < 0.5:
                packed = struct.pack(">i", value)
            else:
                packed = struct.pack(">h", max(-0x8000, min(value, 0x7FFF)))
            data[position : position + len(packed)] = packed
        elif choice == 3:  # truncate
            del data[rng.randrange(len(data) + 1) :]
        elif choice == 4:  # append garbage
            data += rng.randbytes(rng.randint(1, 64))
        elif choice == 5 and len(data) >= 4:  # another API version
            data[2:4] = struct.pack(">h", rng.randrange(-1, 40))
        elif choice == 6 and len(data) >= 2:  # another API key
            data[0:2] = struct.pack(">h", rng.randrange(-1, 80))
        elif choice == 7:  # splice with another frame
            other = rng.choice(corpus)
            cut = rng.randrange(len(data) + 1)
            data = data[:cut] + other[rng.randrange(len(other) + 1) :]
    size = len(data)
    if rng.random() < 0.05:
        size = rng.choice((size + rng.randint(1, 100), max(0, size - 1), -1, 0x7FFFFFFF))
    return _SIZE.pack(size) + bytes(data)


def _request(api_key: int, version: int, body: dict[str, object], correlation_id: int) -> bytes:
    header = client_connection.encode_request_header(
        api_key, version, correlation_id, "fuzz", is_flexible(api_key, version)
    )
    cls = request_class(api_key, version)
    assert cls is not None
    payload = header + encode(build(cls, body))
    return _SIZE.pack(len(payload)) + payload


def sasl_token(rng: random.Random, mechanism: str) -> bytes:
    """A token that is right, nearly right, or nonsense for the mechanism."""
    scram = ScramMechanism.by_name(mechanism) or ScramMechanism.SCRAM_SHA_256
    user = rng.choice((SASL_USER, "nobody", "", "a=2Cb", "x" * 300))
    password = rng.choice((SASL_PASSWORD, "wrong", ""))
    choice = rng.randrange(6)
    if choice == 0:
        return rng.randbytes(rng.randint(0, 200))
    if choice == 1:
        return plain_token(user, password) if rng.random() < 0.8 else b"a\x00b\x00c\x00d"
    client = ScramClient(scram, user, password, nonce=rng.choice(("n", "abc", "x" * 64)))
    if choice == 2:
        return client.first()
    if choice == 3:  # a client-final against a made-up server nonce and salt
        return f"c=biws,r={client.nonce}srv,p=".encode() + rng.randbytes(8).hex().encode()
    if choice == 4:
        return client.first() + b",tokenauth=true" if rng.random() < 0.5 else b"n,a=x,n=y,r=z"
    token = bytearray(client.first())
    for _ in range(rng.randint(1, 4)):
        if token:
            token[rng.randrange(len(token))] = rng.randrange(256)
    return bytes(token)


def sasl_session(rng: random.Random, corpus: list[bytes]) -> list[bytes]:
    """One SASL connection's frames: ApiVersions, SaslHandshake, then tokens (framed as
    SaslAuthenticate, or raw after a v0 handshake), sometimes mutated or out of order."""
    frames = [_request(ApiKey.API_VERSIONS, 3, {"client_software_name": "fuzz",
                                                "client_software_version": "1"}, 1)]  # fmt: skip
    mechanism = rng.choice((*MECHANISMS, "GSSAPI", "", "scram-sha-256"))
    handshake_version = rng.choice((0, 1, 1, 1))
    frames.append(_request(ApiKey.SASL_HANDSHAKE, handshake_version, {"mechanism": mechanism}, 2))
    for correlation_id in range(3, 3 + rng.randint(1, 4)):
        token = sasl_token(rng, mechanism)
        if handshake_version == 0 and rng.random() < 0.8:
            frames.append(_SIZE.pack(len(token)) + token)
        else:
            version = rng.randrange(3)
            frames.append(
                _request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}, correlation_id)
            )
    if rng.random() < 0.3:  # something else in the middle of the exchange
        frames.insert(
            rng.randrange(1, len(frames) + 1), _SIZE.pack(len(c := rng.choice(corpus))) + c
        )
    if rng.random() < 0.3:
        index = rng.randrange(len(frames))
        frames[index] = mutate(frames[index][4:], rng, corpus)
    return frames


def send_batch(port: int, frames: list[bytes], timeout: float) -> str:
    """Sends the frames on one connection and drains answers until the broker closes it or
    goes quiet; returns "closed" or "open" (a quiet connection: e.g. acks=0 needs no answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            for frame in frames:
                sock.sendall(frame)
        except OSError:
            return "closed"
        sock.settimeout(timeout)
        try:
            while sock.recv(65536):
                pass
            return "closed"
        except TimeoutError:
            return "open"
        except OSError:
            return "closed"


def broker_answers(port: int) -> bool:
    request = struct.pack(">hhih", 18, 0, 7, -1)  # ApiVersions v0, no client id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(_SIZE.pack(len(request)) + request)
            sock.settimeout(10)
            header = sock.recv(8)
            return len(header) >= 8 and struct.unpack(">ii", header)[1] == 7
    except OSError:
        return False


async def well_behaved(bootstrap: str, stop: asyncio.Event) -> tuple[int, int]:
    """Writes numbered values until stopped, then reads them all back; (written, read-once)."""
    written = 0
    async with Producer(bootstrap, linger_ms=2) as producer:
        while not stop.is_set():
            futures = [
                await producer.send("well-behaved", str(written + i).encode()) for i in range(50)
            ]
            await asyncio.gather(*futures)
            written += len(futures)
            await asyncio.sleep(0.05)
    seen: Counter[bytes] = Counter()
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        partitions = [TopicPartition("well-behaved", p) for p in range(2)]
        consumer.assign(partitions)
        deadline = time.monotonic() + 60
        while sum(seen.values()) < written and time.monotonic() < deadline:
            seen.update(m.value or b"" for m in await consumer.poll(200))
    expected = {str(i).encode() for i in range(written)}
    exact = set(seen) == expected and all(count == 1 for count in seen.values())
    return written, written if exact else -1


async def fuzz(frames: int, seed: int, scratch: Path, timeout: float = 0.3) -> Counter[str]:
    """Runs the whole fuzz session; returns counts (connections closed/open, failures)."""
    rng = random.Random(seed)
    results: Counter[str] = Counter()
    broker = BrokerProcess(scratch / "data", SETTINGS, listeners=LISTENERS).start()
    try:
        corpus = await capture_corpus(broker.bootstrap)
        async with Admin(broker.bootstrap) as admin:  # someone to authenticate as
            for mechanism in MECHANISMS[1:]:  # (one request per mechanism: same user)
                await admin.alter_user_scram_credentials(
                    [ScramUpsertion(SASL_USER, SASL_PASSWORD, mechanism)]
                )
        async with Admin(broker.bootstrap) as admin:
            await admin.create_topics([NewTopic("well-behaved", num_partitions=2)])
        stop = asyncio.Event()
        client = asyncio.create_task(well_behaved(broker.bootstrap, stop))
        sent = 0
        while sent < frames:
            if rng.random() < SASL_SHARE:
                batch = sasl_session(rng, corpus)
                port = broker.ports["SASL_PLAINTEXT"]
                results["sasl_connections"] += 1
            else:
                batch = [
                    mutate(rng.choice(corpus), rng, corpus) for _ in range(FRAMES_PER_CONNECTION)
                ]
                port = broker.port
            results[await asyncio.to_thread(send_batch, port, batch, timeout)] += 1
            sent += len(batch)
            if broker.process is None or broker.process.poll() is not None:
                results["broker_exited"] += 1
                break
            if sent % 2_000 < FRAMES_PER_CONNECTION and not await asyncio.to_thread(
                broker_answers, broker.port
            ):
                results["broker_unresponsive"] += 1
        stop.set()
        written, exact = await client
        results["frames"] = sent
        results["well_behaved_written"] = written
        if exact != written:
            results["well_behaved_lost_or_duplicated"] += 1
        if not await asyncio.to_thread(broker_answers, broker.port):
            results["broker_unresponsive"] += 1
        results["corpus_frames"] = len(corpus)
    finally:
        broker.kill()
    # A decodable request that makes a handler raise is a bug even though the broker survives
    # (it closes that one connection): the client deserved an error code.
    results["handler_crashes"] = broker.log().count("failed; closing the connection")
    return results


FAILURES = (
    "broker_exited",
    "broker_unresponsive",
    "well_behaved_lost_or_duplicated",
    "handler_crashes",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lockgate-fuzz-") as scratch:
        results = asyncio.run(fuzz(options.frames, options.seed, Path(scratch)))
    for name, count in sorted(results.items()):
        print(f"{name:<34} {count}")
    print(f"{results['frames'] / (time.monotonic() - started):.0f} frames/s")
    return 1 if any(results[f] for f in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
