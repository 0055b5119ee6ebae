# Kafka's `sasl.jaas.config` value, as clients (and brokers, for their inter-broker login) give
# it: `<login module class> <flag> key="value" ...;`. lockgate reads the PLAIN and SCRAM login
# modules' options (username, password; a broker's PLAIN module also lists user_NAME="secret"
# entries); any other module (Kerberos, OAUTHBEARER) is refused by name, never ignored.
from __future__ import annotations

from dataclasses import dataclass, field

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
# which mechanisms each module logs in with
MODULE_MECHANISMS = {
    PLAIN_MODULE: ("PLAIN",),
    SCRAM_MODULE: ("SCRAM-SHA-256", "SCRAM-SHA-512"),
}
FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """The value is not a JAAS configuration lockgate can use; the message says why."""


@dataclass(frozen=True, slots=True)
class JaasLogin:
    module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def username(self) -> str | None:
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def check_mechanism(self, mechanism: str) -> None:
        """Raises JaasError when this module does not log in with `mechanism`."""
        if mechanism.upper() not in MODULE_MECHANISMS.get(self.module, ()):
            raise JaasError(f"sasl.jaas.config: {self.module} does not log in with {mechanism}")


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) with kind "word", "string", "=" or ";"; strings lose their quotes and
    their backslash escapes, as Java's StreamTokenizer reads them."""
    result: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char.isspace():
            position += 1
        elif char in "=;":
            result.append((char, char))
            position += 1
        elif char in "\"'":
            value: list[str] = []
            position += 1
            while True:
                if position >= len(text):
                    raise JaasError("sasl.jaas.config: a quoted value is not closed")
                current = text[position]
                if current == "\\" and position + 1 < len(text):
                    value.append(text[position + 1])
                    position += 2
                    continue
                position += 1
                if current == char:
                    break
                value.append(current)
            result.append(("string", "".join(value)))
        else:
            start = position
            while position < len(text) and not text[position].isspace() and \
                    text[position] not in "=;\"'":  # fmt: skip
                position += 1
            result.append(("word", text[start:position]))
    return result


def parse_jaas(text: str) -> list[JaasLogin]:
    """Every login module of the value, in order; raises JaasError on a malformed value."""
    tokens = _tokens(text)
    logins: list[JaasLogin] = []
    index = 0

    def take(*kinds: str) -> tuple[str, str]:
        nonlocal index
        if index >= len(tokens):
            raise JaasError(f"sasl.jaas.config ends early (expected {' or '.join(kinds)})")
        kind, value = tokens[index]
        if kind not in kinds:
            raise JaasError(f"sasl.jaas.config: expected {' or '.join(kinds)}, found {value!r}")
        index += 1
        return kind, value

    while index < len(tokens):
        _, module = take("word")
        _, flag = take("word")
        if flag.lower() not in FLAGS:
            raise JaasError(
                f"sasl.jaas.config: {flag!r} is not a login module flag ({', '.join(FLAGS)})"
            )
        options: dict[str, str] = {}
        while True:
            kind, key = take("word", ";")
            if kind == ";":
                break
            take("=")
            _, value = take("word", "string")
            options[key] = value
        logins.append(JaasLogin(module, flag.lower(), options))
    if not logins:
        raise JaasError("sasl.jaas.config is empty")
    return logins


def client_login(text: str, mechanism: str) -> JaasLogin:
    """The one login module a client (or a broker connecting to another) authenticates with:
    PLAIN or SCRAM, matching `mechanism`, with a username and password."""
    logins = parse_jaas(text)
    if len(logins) != 1:
        raise JaasError(
            f"sasl.jaas.config names {len(logins)} login modules; a client needs exactly one"
        )
    login = logins[0]
    if login.module not in MODULE_MECHANISMS:
        raise JaasError(
            f"sasl.jaas.config: login module {login.module} is not served; use {PLAIN_MODULE} "
            f"or {SCRAM_MODULE}"
        )
    login.check_mechanism(mechanism)
    if login.username is None or login.password is None:
        raise JaasError("sasl.jaas.config: the login module needs username and password")
    return login
