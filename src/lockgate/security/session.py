# Who is on the other end of a connection: the listener it came in on, its security protocol,
# and the principal it authenticated as. One Session per connection; a SASL listener's session
# starts unauthenticated and becomes authenticated once, after a successful SaslAuthenticate.
from __future__ import annotations

import enum
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(slots=True)
class Session:
    listener: str  # the listener's name, upper case (PLAINTEXT, SASL_SSL, CLIENT, ...)
    protocol: SecurityProtocol
    host: str  # the client's address, without the port (ACLs match on it)
    principal: str = ANONYMOUS  # "User:NAME" (or the TLS client certificate's DN)
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds
    mechanism: str | None = None  # the SASL mechanism chosen by SaslHandshake

    @classmethod
    def plaintext(cls, host: str = "127.0.0.1") -> Session:
        """The session of an in-process caller or a test: PLAINTEXT, anonymous."""
        return cls("PLAINTEXT", SecurityProtocol.PLAINTEXT, host)

    @property
    def user(self) -> str:
        """The principal's name without its type: what quotas and SCRAM credentials key on."""
        return self.principal.split(":", 1)[1] if ":" in self.principal else self.principal
