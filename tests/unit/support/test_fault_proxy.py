"""The fault proxy against a trivial framed echo server: what passes, what each rule does to
which frame, runtime control from the test thread, counters, and a clean stop."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.fault_proxy import Action, Direction, FaultProxy, Rule

REQUEST, RESPONSE = Direction.REQUEST, Direction.RESPONSE
PRODUCE, FETCH, METADATA = 0, 1, 3
TIMEOUT = 5.0
SILENCE = 0.3  # how long "nothing arrives" is waited for


# -- a server that answers each frame with its correlation id and its body -----------------


class EchoServer(socketserver.ThreadingTCPServer):
    """Frames in, frames out: the answer to `api key, version, correlation id, body` is
    `correlation id, body`. Records every complete frame and every frame cut short."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        self.received: list[bytes] = []
        self.partial: list[bytes] = []
        self.connections = 0
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def frames(self) -> list[bytes]:
        with self.lock:
            return list(self.received)


class _EchoHandler(socketserver.BaseRequestHandler):
    server: EchoServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(TIMEOUT * 2)
        with self.server.lock:
            self.server.connections += 1
        buffer = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                if buffer:
                    with self.server.lock:
                        self.server.partial.append(buffer)
                return
            buffer += chunk
            while len(buffer) >= 4:
                (size,) = struct.unpack_from(">i", buffer)
                if size < 0 or len(buffer) < 4 + size:
                    break  # incomplete, or not a frame at all: kept until EOF
                payload, buffer = buffer[4 : 4 + size], buffer[4 + size :]
                with self.server.lock:
                    self.server.received.append(payload)
                answer = payload[4:] if len(payload) >= 8 else payload
                try:
                    sock.sendall(struct.pack(">i", len(answer)) + answer)
                except OSError:
                    return


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(upstream_port=echo.port) as started:
        yield started


# -- a blocking client ----------------------------------------------------------------------


class Client:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, correlation_id: int, body: bytes = b"", version: int = 1) -> None:
        payload = struct.pack(">hhi", api_key, version, correlation_id) + body
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def receive(self, timeout: float = TIMEOUT) -> tuple[int, bytes] | None:
        """(correlation id, body) of the next answer; None on EOF or when nothing comes."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">i", self.buffer)
                if len(self.buffer) >= 4 + size:
                    payload = self.buffer[4 : 4 + size]
                    self.buffer = self.buffer[4 + size :]
                    return struct.unpack_from(">i", payload)[0], payload[4:]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.buffer += chunk

    def is_closed(self, timeout: float = TIMEOUT) -> bool:
        """True once the proxy closed this connection (EOF or reset) within `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            if not chunk:
                return True
            self.buffer += chunk
        return False


def roundtrip(client: Client, api_key: int, correlation_id: int, body: bytes = b"") -> bytes | None:
    client.send(api_key, correlation_id, body)
    answer = client.receive()
    if answer is None:
        return None
    assert answer[0] == correlation_id
    return answer[1]


def wait_for(condition: object, timeout: float = TIMEOUT) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# -- tests ------------------------------------------------------------------------------------


def test_frames_pass_both_ways_and_are_counted(proxy: FaultProxy, echo: EchoServer) -> None:
    client = Client(proxy.port)
    try:
        for correlation_id in range(1, 21):
            key = PRODUCE if correlation_id % 2 else METADATA
            assert roundtrip(client, key, correlation_id, b"body%d" % correlation_id) == (
                b"body%d" % correlation_id
            )
    finally:
        client.close()
    assert len(echo.frames()) == 20
    assert proxy.frames(REQUEST) == 20 and proxy.frames(RESPONSE) == 20
    assert proxy.frames(REQUEST, PRODUCE) == 10 and proxy.frames(RESPONSE, PRODUCE) == 10
    assert proxy.frames(RESPONSE, METADATA) == 10
    counters = proxy.counters()
    assert counters["connections_accepted"] == 1
    assert counters["bytes_request"] == sum(4 + 8 + len(b"body%d" % i) for i in range(1, 21))
    wait_for(lambda: proxy.counters().get("connections_closed") == 1)


def test_drop_the_nth_response(proxy: FaultProxy, echo: EchoServer) -> None:
    rule = proxy.drop(RESPONSE, skip=1)
    client = Client(proxy.port)
    try:
        assert roundtrip(client, PRODUCE, 1, b"a") == b"a"
        client.send(PRODUCE, 2, b"b")
        assert client.receive(SILENCE) is None, "the second answer must be dropped"
        assert roundtrip(client, PRODUCE, 3, b"c") == b"c"
    finally:
        client.close()
    assert len(echo.frames()) == 3, "a dropped response still reached the server as a request"
    assert rule.applied == 1 and rule.matched == 3 and rule.exhausted
    assert proxy.count(Action.DROP, RESPONSE) == 1 and proxy.count(Action.DROP, REQUEST) == 0


def test_drop_responses_by_the_api_key_of_their_request(proxy: FaultProxy) -> None:
    rule = proxy.drop(RESPONSE, [PRODUCE], every=2, limit=100)
    client = Client(proxy.port)
    answered: list[int] = []
    try:
        for correlation_id in range(1, 13):  # 1,3,5... Produce; 2,4,6... Metadata
            client.send(PRODUCE if correlation_id % 2 else METADATA, correlation_id)
        for _ in range(12):
            answer = client.receive(SILENCE)
            if answer is None:
                break
            answered.append(answer[0])
    finally:
        client.close()
    # Produce requests 1, 5, 9 (every other one, starting with the first) lose their answer
    assert answered == [2, 3, 4, 6, 7, 8, 10, 11, 12]
    assert rule.applied == 3 and rule.matched == 6


def test_dropped_request_never_reaches_the_server(proxy: FaultProxy, echo: EchoServer) -> None:
    proxy.drop(REQUEST, [FETCH])
    client = Client(proxy.port)
    try:
        client.send(FETCH, 1, b"lost")
        assert client.receive(SILENCE) is None
        assert roundtrip(client, FETCH, 2, b"kept") == b"kept"
    finally:
        client.close()
    assert [frame[8:] for frame in echo.frames()] == [b"kept"]


def test_delay_holds_a_frame_and_keeps_the_order(proxy: FaultProxy) -> None:
    rule = proxy.delay(RESPONSE, 0.4, [PRODUCE])
    client = Client(proxy.port)
    try:
        started = time.monotonic()
        client.send(PRODUCE, 1)
        client.send(METADATA, 2)
        first, second = client.receive(), client.receive()
        elapsed = time.monotonic() - started
    finally:
        client.close()
    assert first is not None and second is not None
    assert (first[0], second[0]) == (1, 2), "a delay must not reorder a connection's frames"
    assert elapsed >= 0.4
    assert rule.applied == 1


def test_duplicated_request_reaches_the_server_twice_but_the_client_sees_one_answer(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    rule = proxy.duplicate_requests([PRODUCE])
    client = Client(proxy.port)
    try:
        assert roundtrip(client, PRODUCE, 7, b"once") == b"once"
        assert roundtrip(client, PRODUCE, 8, b"next") == b"next"
        assert client.receive(SILENCE) is None, "the copy's answer leaked to the client"
    finally:
        client.close()
    assert [frame[8:] for frame in echo.frames()] == [b"once", b"once", b"next"]
    assert rule.applied == 1
    assert proxy.counters()["swallowed_duplicate_responses"] == 1


def test_cut_after_n_frames_forwards_the_nth(proxy: FaultProxy, echo: EchoServer) -> None:
    proxy.cut(REQUEST, after=True, skip=2)
    client = Client(proxy.port)
    try:
        assert roundtrip(client, PRODUCE, 1) == b""
        assert roundtrip(client, PRODUCE, 2) == b""
        client.send(PRODUCE, 3, b"third")
        assert client.is_closed()
    finally:
        client.close()
    wait_for(lambda: len(echo.frames()) == 3)
    assert echo.frames()[-1][8:] == b"third"
    assert proxy.count(Action.CUT_AFTER) == 1


def test_cut_on_a_frame_does_not_forward_it(proxy: FaultProxy, echo: EchoServer) -> None:
    proxy.cut(RESPONSE, [METADATA])
    client = Client(proxy.port)
    try:
        assert roundtrip(client, PRODUCE, 1) == b""
        client.send(METADATA, 2)
        assert client.receive() is None
        assert client.is_closed()
    finally:
        client.close()
    assert len(echo.frames()) == 2  # the request went through, its answer did not
    # a new connection is not affected: the rule was used up
    again = Client(proxy.port)
    try:
        assert roundtrip(again, METADATA, 3) == b""
    finally:
        again.close()


def test_truncate_sends_part_of_a_frame_then_cuts(proxy: FaultProxy, echo: EchoServer) -> None:
    proxy.add_rule(Rule(Action.TRUNCATE, REQUEST, truncate_to=10))
    client = Client(proxy.port)
    try:
        client.send(PRODUCE, 1, b"0123456789")
        assert client.is_closed()
    finally:
        client.close()
    wait_for(lambda: len(echo.partial) == 1)
    assert len(echo.partial[0]) == 10 and echo.frames() == []


def test_cut_at_a_byte_count_even_inside_a_frame(proxy: FaultProxy, echo: EchoServer) -> None:
    rule = proxy.cut_at_byte(REQUEST, 30)
    client = Client(proxy.port)
    try:
        assert roundtrip(client, PRODUCE, 1, b"x" * 10) == b"x" * 10  # 22 bytes
        client.send(PRODUCE, 2, b"y" * 10)  # would end at byte 44
        assert client.is_closed()
    finally:
        client.close()
    wait_for(lambda: len(echo.partial) == 1)
    assert len(echo.partial[0]) == 8 and len(echo.frames()) == 1
    assert rule.applied == 1
    assert proxy.counters()["bytes_request"] == 30


def test_fragmented_frame_arrives_whole(proxy: FaultProxy, echo: EchoServer) -> None:
    rule = proxy.add_rule(
        Rule(Action.FRAGMENT, REQUEST, fragment_bytes=3, fragment_pause=0.001, limit=2)
    )
    client = Client(proxy.port)
    try:
        for correlation_id in range(1, 4):
            assert roundtrip(client, PRODUCE, correlation_id, b"z" * 50) == b"z" * 50
    finally:
        client.close()
    assert rule.applied == 2 and len(echo.frames()) == 3


def test_rules_scoped_to_one_connection(proxy: FaultProxy) -> None:
    first, second = Client(proxy.port), Client(proxy.port)
    try:
        assert roundtrip(first, PRODUCE, 1) == b"" and roundtrip(second, PRODUCE, 1) == b""
        host, port = second.sock.getsockname()[:2]
        (target,) = [info.id for info in proxy.connections() if info.client == f"{host}:{port}"]
        proxy.drop(RESPONSE, connection=target, limit=10)
        assert roundtrip(first, PRODUCE, 2) == b""
        second.send(PRODUCE, 2)
        assert second.receive(SILENCE) is None
    finally:
        first.close()
        second.close()


def test_per_connection_counting_acts_on_each_connection(proxy: FaultProxy) -> None:
    rule = proxy.drop(RESPONSE, skip=1, limit=10, per_connection=True)
    for _ in range(3):
        client = Client(proxy.port)
        try:
            assert roundtrip(client, PRODUCE, 1) == b""
            for correlation_id in (2, 3):  # the second answer and every later one are dropped
                client.send(PRODUCE, correlation_id)
                assert client.receive(SILENCE) is None
        finally:
            client.close()
    assert rule.applied == 6


def test_limit_bounds_a_rule_and_rules_change_at_runtime(proxy: FaultProxy) -> None:
    client = Client(proxy.port)
    try:
        rule = proxy.drop(RESPONSE, limit=2)
        for correlation_id in (1, 2):
            client.send(PRODUCE, correlation_id)
            assert client.receive(SILENCE) is None
        assert rule.applied == 2 and rule.exhausted
        assert roundtrip(client, PRODUCE, 3) == b""
        assert rule.applied == 2 and rule.matched == 3
        proxy.clear_rules()
        blocked = proxy.drop(RESPONSE, limit=100)
        client.send(PRODUCE, 10)
        assert client.receive(SILENCE) is None
        proxy.remove_rule(blocked)
        assert roundtrip(client, PRODUCE, 11) == b""
        assert blocked.applied == 1
    finally:
        client.close()


def test_rules_added_from_another_thread_during_traffic(proxy: FaultProxy) -> None:
    client = Client(proxy.port)
    added = threading.Event()

    def add() -> None:
        proxy.drop(RESPONSE, [METADATA], limit=1)
        added.set()

    try:
        assert roundtrip(client, METADATA, 1) == b""
        adder = threading.Thread(target=add)
        adder.start()
        adder.join(TIMEOUT)
        assert added.is_set()
        client.send(METADATA, 2)
        assert client.receive(SILENCE) is None
        assert roundtrip(client, METADATA, 3) == b""
    finally:
        client.close()


def test_refusing_and_missing_upstream_close_new_connections(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    proxy.refuse_connections()
    refused = Client(proxy.port)
    try:
        assert refused.is_closed()
    finally:
        refused.close()
    proxy.refuse_connections(False)
    closed_port = FaultProxy().start()  # a port with nothing behind it once stopped
    port = closed_port.port
    closed_port.stop()
    proxy.set_upstream(port)
    nowhere = Client(proxy.port)
    try:
        assert nowhere.is_closed()
    finally:
        nowhere.close()
    proxy.set_upstream(echo.port)
    client = Client(proxy.port)
    try:
        assert roundtrip(client, PRODUCE, 1, b"back") == b"back"
    finally:
        client.close()
    counters = proxy.counters()
    assert counters["refused"] == 1 and counters["upstream_failures"] == 1


def test_cut_connections_from_the_test(proxy: FaultProxy) -> None:
    clients = [Client(proxy.port) for _ in range(3)]
    try:
        for client in clients:
            assert roundtrip(client, PRODUCE, 1) == b""
        assert proxy.cut_connections() == 3
        assert all(client.is_closed() for client in clients)
        wait_for(lambda: not any(info.open for info in proxy.connections()))
    finally:
        for client in clients:
            client.close()


def test_upstream_change_reaches_new_connections_only(echo: EchoServer) -> None:
    with FaultProxy() as proxy:
        nothing = Client(proxy.port)  # no upstream yet: accepted, then closed
        try:
            assert nothing.is_closed()
        finally:
            nothing.close()
        proxy.set_upstream(echo.port)
        client = Client(proxy.port)
        try:
            assert roundtrip(client, PRODUCE, 1, b"ok") == b"ok"
        finally:
            client.close()


def test_bytes_that_are_not_kafka_frames_pass_raw(proxy: FaultProxy, echo: EchoServer) -> None:
    client = Client(proxy.port)
    try:
        client.sock.sendall(struct.pack(">i", -5) + b"garbage")
        wait_for(lambda: proxy.counters().get("raw_request") == 1)
    finally:
        client.close()
    wait_for(lambda: len(echo.partial) == 1)
    assert echo.partial[0] == struct.pack(">i", -5) + b"garbage"


def test_invalid_rules_are_refused() -> None:
    with pytest.raises(ValueError):
        Rule(Action.DUPLICATE, RESPONSE)
    with pytest.raises(ValueError):
        Rule(Action.DELAY, REQUEST, delay=3600)
    with pytest.raises(ValueError):
        Rule(Action.DROP, REQUEST, every=0)


def test_stop_closes_everything(echo: EchoServer) -> None:
    proxy = FaultProxy(upstream_port=echo.port).start()
    client = Client(proxy.port)
    try:
        assert roundtrip(client, PRODUCE, 1) == b""
        port = proxy.port
        proxy.stop()
        assert not proxy.running
        assert client.is_closed()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        proxy.stop()  # stopping twice is harmless
    finally:
        client.close()
        proxy.stop()
