# console/settings.py — what one console process is started with: where the cluster is (and
# how to authenticate to it), where to listen, and the console's own safety settings.
# Invariant: the password never reaches a repr, a log line or a page (repr=False, and only
# auth.py reads it).
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from lockgate.client.security import ClientSecurity

DEFAULT_LISTEN_HOST = "127.0.0.1"
DEFAULT_LISTEN_PORT = 8080


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    bootstrap_servers: str
    security: ClientSecurity | None = field(default=None, repr=False)
    client_id: str = "lockgate-console"
    request_timeout_ms: int = 30_000
    listen_host: str = DEFAULT_LISTEN_HOST
    listen_port: int = DEFAULT_LISTEN_PORT
    read_only: bool = False
    # None: no login is possible, so no mutation either (the console is read-only in effect)
    password: str | None = field(default=None, repr=False)
    session_max_age_s: int = 8 * 3600

    @property
    def loopback_only(self) -> bool:
        """Listening on a loopback address only: then requests must name a loopback host (a
        page of another site that resolves its name to 127.0.0.1 is refused)."""
        if self.listen_host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.listen_host.strip("[]")).is_loopback
        except ValueError:
            return False

    @property
    def can_mutate(self) -> bool:
        return not self.read_only and self.password is not None


def parse_listen(text: str) -> tuple[str, int]:
    """ "HOST:PORT", "[::1]:PORT" or ":PORT" (loopback) → (host, port); ValueError if bad."""
    host, separator, port_text = text.rpartition(":")
    if not separator:
        raise ValueError(f"--listen expects HOST:PORT, got {text!r}")
    host = host.strip("[]") or DEFAULT_LISTEN_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--listen: bad port in {text!r}") from None
    if not 0 <= port < 65536:
        raise ValueError(f"--listen: port {port} out of range")
    return host, port
