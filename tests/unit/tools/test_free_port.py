"""The ports tests and `lockgate cluster up` start servers on: free when picked, never two
alike in one process, and below the kernel's ephemeral range, so that no connection opened
before the server starts can be given the port (a broker once failed to start on a port an
outgoing connection had taken meanwhile)."""

from __future__ import annotations

import socket
from pathlib import Path

from lockgate.tools.devcluster import free_port


def test_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port < first_ephemeral for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # free indeed
