# SASL mechanisms, pure (no IO, no clock): Kafka's SCRAM credential format and its derivation
# from a password, the RFC 5802 server and client exchanges for SCRAM-SHA-256/512, PLAIN
# (RFC 4616) checked against the stored SCRAM credential (no password is ever kept in clear),
# and the per-connection SASL state machine the broker drives (handshake → tokens → done).
#
# Invariants: an exchange succeeds at most once and never after a failure; an unknown user is
# answered exactly as a known one (a stand-in salt derived from a per-process secret) and
# fails only where a wrong password fails, so the answers do not say which users exist.
from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

MIN_ITERATIONS = 4096  # Kafka's minimum for both SCRAM mechanisms
MAX_ITERATIONS = 16384  # Kafka's maximum in AlterUserScramCredentials
# Kafka's only SCRAM extension; delegation tokens are not served, so a client asking for
# token authentication fails.
TOKEN_AUTH_EXTENSION = "tokenauth"
# Keys the stand-in credentials of unknown users. Per process: a restarted broker invents
# other salts for them (real users' salts stay), which a patient prober could notice.
STAND_IN_SECRET = secrets.token_bytes(32)


class ScramMechanism(enum.Enum):
    # (mechanism name, Kafka's type code in Describe/AlterUserScramCredentials, hash)
    SCRAM_SHA_256 = ("SCRAM-SHA-256", 1, "sha256")
    SCRAM_SHA_512 = ("SCRAM-SHA-512", 2, "sha512")

    @property
    def mechanism_name(self) -> str:
        return self.value[0]

    @property
    def type_code(self) -> int:
        return self.value[1]

    @property
    def hash_name(self) -> str:
        return self.value[2]

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        for item in cls:
            if item.mechanism_name == name.upper():
                return item
        return None

    @classmethod
    def by_type(cls, code: int) -> ScramMechanism | None:
        for item in cls:
            if item.type_code == code:
                return item
        return None

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi() of RFC 5802: PBKDF2 with this mechanism's HMAC. Kafka applies no SASLprep
        (it takes the password's UTF-8 bytes as they are), nor do we."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """Kafka's stored SCRAM credential: what the server needs to verify a proof and sign its
    answer, from which the password cannot be recovered."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, object]:
        encode = base64.b64encode
        return {
            "salt": encode(self.salt).decode(),
            "stored_key": encode(self.stored_key).decode(),
            "server_key": encode(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ScramCredential:
        decode = base64.b64decode
        return cls(
            decode(str(data["salt"])),
            decode(str(data["stored_key"])),
            decode(str(data["server_key"])),
            int(str(data["iterations"])),
        )


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """What AlterUserScramCredentials stores: the client derived the salted password."""
    client_key = mechanism.hmac(salted_password, b"Client Key")
    return ScramCredential(
        salt,
        mechanism.hash(client_key),
        mechanism.hmac(salted_password, b"Server Key"),
        iterations,
    )


def new_salt() -> bytes:
    return secrets.token_bytes(32)


def derive_credential(
    mechanism: ScramMechanism,
    password: str,
    iterations: int = MIN_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    salt = new_salt() if salt is None else salt
    salted = mechanism.salted_password(password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


def password_matches(mechanism: ScramMechanism, credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one the credential was derived from (constant-time compare)."""
    derived = derive_credential(mechanism, password, credential.iterations, credential.salt)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


class AuthenticationFailed(Exception):
    """The exchange failed. The message is for the broker's log only: the client is told
    Kafka's generic 'invalid credentials' text, whatever the reason."""


class IllegalSaslState(Exception):
    """A SASL request out of order (ILLEGAL_SASL_STATE)."""


# -- SCRAM messages (RFC 5802 section 7) ---------------------------------------------------------

_VALUE = r"[^,]*"
_CLIENT_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>[^,]*))?,n=(?P<user>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?P<extensions>(?:,[A-Za-z][A-Za-z0-9]*=" + _VALUE + r")*)"
)
_CLIENT_FINAL = re.compile(
    r"(?P<without_proof>c=(?P<channel>[A-Za-z0-9+/=]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[A-Za-z][A-Za-z0-9]*=" + _VALUE + r")*),p=(?P<proof>[A-Za-z0-9+/=]+)"
)
_SERVER_FIRST = re.compile(
    r"(?:m=[^,]*,)?r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+),s=(?P<salt>[A-Za-z0-9+/=]+),"
    r"i=(?P<iterations>[0-9]+)(?:,.*)?"
)
_SERVER_FINAL = re.compile(r"(?:e=(?P<error>[^,]*)|v=(?P<signature>[A-Za-z0-9+/=]+))(?:,.*)?")


def decode_sasl_name(name: str) -> str:
    """RFC 5802 saslname: '=2C' is ',' and '=3D' is '='; any other '=' is malformed."""
    if re.search(r"=(?!2C|3D)", name):
        raise AuthenticationFailed(f"malformed SCRAM user name {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def encode_sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _text(token: bytes) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("SASL token is not UTF-8") from None


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise AuthenticationFailed(f"bad base64 {text[:20]!r}") from None


@dataclass(frozen=True, slots=True)
class ClientFirst:
    authzid: str
    user: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # the message without its GS2 header: part of the AuthMessage
    gs2_header: str

    @classmethod
    def parse(cls, token: bytes) -> ClientFirst:
        text = _text(token)
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise AuthenticationFailed("malformed SCRAM client-first message")
        authzid = decode_sasl_name(match["authzid"] or "")
        extensions = {}
        for item in match["extensions"].split(",")[1:]:
            key, _, value = item.partition("=")
            extensions[key] = value
        gs2 = f"n,{'a=' + match['authzid'] if match['authzid'] is not None else ''},"
        return cls(
            authzid,
            decode_sasl_name(match["user"]),
            match["nonce"],
            extensions,
            text[len(gs2) :],
            gs2,
        )


class _ScramStep(enum.Enum):
    CLIENT_FIRST = 1
    CLIENT_FINAL = 2
    COMPLETE = 3
    FAILED = 4


class ScramServer:
    """The server side of one SCRAM exchange. `user_of(token)` names the user whose
    credential the next `evaluate` needs (the caller fetches it, which may take IO)."""

    def __init__(
        self, mechanism: ScramMechanism, stand_in_secret: bytes, server_nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self.user: str | None = None  # set once complete
        self._server_nonce = server_nonce  # (tests pin it; otherwise fresh per exchange)
        self._secret = stand_in_secret
        self._step = _ScramStep.CLIENT_FIRST
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._claimed_user = ""

    @property
    def complete(self) -> bool:
        return self._step is _ScramStep.COMPLETE

    def user_of(self, token: bytes) -> str | None:
        if self._step is not _ScramStep.CLIENT_FIRST:
            return None
        try:
            return ClientFirst.parse(token).user
        except AuthenticationFailed:
            return None

    def evaluate(
        self, token: bytes, credentials: Mapping[str, ScramCredential] | None = None
    ) -> bytes:
        """The next server message; raises AuthenticationFailed (then the exchange is over)."""
        try:
            if self._step is _ScramStep.CLIENT_FIRST:
                return self._receive_first(token, credentials or {})
            if self._step is _ScramStep.CLIENT_FINAL:
                return self._receive_final(token)
        except AuthenticationFailed:
            self._step = _ScramStep.FAILED
            self._credential = None
            raise
        step, self._step = self._step, _ScramStep.FAILED
        raise IllegalSaslState(f"SCRAM token after the exchange ended ({step.name})")

    def _stand_in(self, user: str) -> ScramCredential:
        """A credential for a user who does not exist: same shape, stable salt per name (a
        fresh one each time would reveal the user is unknown), matching no password."""
        salt = self.mechanism.hmac(self._secret, b"salt:" + user.encode())
        key = self.mechanism.hmac(self._secret, b"key:" + user.encode())
        return ScramCredential(salt, key, key, MIN_ITERATIONS)

    def _receive_first(self, token: bytes, credentials: Mapping[str, ScramCredential]) -> bytes:
        first = ClientFirst.parse(token)
        # other extensions are ignored, as Kafka does
        if first.extensions.get(TOKEN_AUTH_EXTENSION, "false").lower() == "true":
            raise AuthenticationFailed("delegation token authentication is not served")
        if first.authzid and first.authzid != first.user:
            raise AuthenticationFailed(
                f"authorization id {first.authzid!r} differs from user {first.user!r}"
            )
        credential = credentials.get(self.mechanism.mechanism_name)
        if credential is None or credential.iterations < MIN_ITERATIONS:
            self._credential = None  # fail at the proof, like a wrong password
            shown = self._stand_in(first.user)
        else:
            self._credential = credential
            shown = credential
        self._first = first
        self._claimed_user = first.user
        self._nonce = first.nonce + (self._server_nonce or secrets.token_urlsafe(24))
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(shown.salt).decode()},i={shown.iterations}"
        )
        self._step = _ScramStep.CLIENT_FINAL
        return self._server_first.encode()

    def _receive_final(self, token: bytes) -> bytes:
        assert self._first is not None
        match = _CLIENT_FINAL.fullmatch(_text(token))
        if match is None:
            raise AuthenticationFailed("malformed SCRAM client-final message")
        # Kafka checks only that the nonce ends with the exchange's, and librdkafka relies on
        # it: it sends its own nonce again in front of the combined one
        if not match["nonce"].endswith(self._nonce):
            raise AuthenticationFailed("client-final nonce is not the exchange's")
        if _b64(match["channel"]) != self._first.gs2_header.encode():
            raise AuthenticationFailed("channel binding differs from the GS2 header")
        credential = self._credential
        if credential is None:
            raise AuthenticationFailed(f"unknown user {self._claimed_user!r}")
        auth_message = ",".join(
            (self._first.bare, self._server_first, match["without_proof"])
        ).encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        proof = _b64(match["proof"])
        if len(proof) != len(client_signature):
            raise AuthenticationFailed("client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise AuthenticationFailed(f"wrong proof for user {self._claimed_user!r}")
        signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._credential = None
        self.user = self._claimed_user
        self._step = _ScramStep.COMPLETE
        return b"v=" + base64.b64encode(signature)


class ScramClient:
    """The client side: `first()`, then `final(server_first)`, then `verify(server_final)`."""

    def __init__(
        self, mechanism: ScramMechanism, user: str, password: str, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self.user = user
        self.password = password
        self.nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._bare = f"n={encode_sasl_name(user)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise AuthenticationFailed(f"malformed SCRAM server-first message {text[:60]!r}")
        if not match["nonce"].startswith(self.nonce) or match["nonce"] == self.nonce:
            raise AuthenticationFailed("the server's nonce does not extend ours")
        iterations = int(match["iterations"])
        if iterations < MIN_ITERATIONS:
            raise AuthenticationFailed(f"the server asks for {iterations} iterations (too few)")
        salted = self.mechanism.salted_password(self.password, _b64(match["salt"]), iterations)
        without_proof = f"c=biws,r={match['nonce']}"  # biws = base64("n,,")
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        client_signature = self.mechanism.hmac(self.mechanism.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        server_key = self.mechanism.hmac(salted, b"Server Key")
        self._server_signature = self.mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        match = _SERVER_FINAL.fullmatch(server_final.decode("utf-8", "replace"))
        if match is None:
            raise AuthenticationFailed("malformed SCRAM server-final message")
        if match["error"] is not None:
            raise AuthenticationFailed(f"the server refused: {match['error']}")
        if not hmac.compare_digest(_b64(match["signature"]), self._server_signature):
            raise AuthenticationFailed("the server's signature is wrong: not the real server?")


# -- PLAIN (RFC 4616) ----------------------------------------------------------------------------


def parse_plain(token: bytes) -> tuple[str, str]:
    """`[authzid] NUL user NUL password` → (user, password). An authorization id, when
    given, must be the user (Kafka refuses to act for another)."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationFailed("malformed PLAIN token")
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise AuthenticationFailed("PLAIN token is not UTF-8") from None
    if not user or not password:
        raise AuthenticationFailed("PLAIN token without user or password")
    if authzid and authzid != user:
        raise AuthenticationFailed(f"authorization id {authzid!r} differs from user {user!r}")
    return user, password


def plain_token(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


class PlainServer:
    """PLAIN, checked against the user's stored SCRAM credentials: the password is right if
    it derives any of them (Kafka reads PLAIN passwords from its JAAS file instead)."""

    mechanism_name = "PLAIN"

    def __init__(self, stand_in_secret: bytes) -> None:
        self.user: str | None = None
        self._secret = stand_in_secret
        self._done = False
        self.complete = False

    def user_of(self, token: bytes) -> str | None:
        if self._done:
            return None
        try:
            return parse_plain(token)[0]
        except AuthenticationFailed:
            return None

    def evaluate(
        self, token: bytes, credentials: Mapping[str, ScramCredential] | None = None
    ) -> bytes:
        if self._done:
            raise IllegalSaslState("PLAIN takes one token")
        self._done = True
        user, password = parse_plain(token)
        stored = [
            (mechanism, credentials[mechanism.mechanism_name])
            for mechanism in ScramMechanism
            if credentials and mechanism.mechanism_name in credentials
        ]
        if not stored:
            # the same work as a known user's check, so that timing does not tell either
            stand_in = derive_credential(ScramMechanism.SCRAM_SHA_256, "", salt=self._secret)
            password_matches(ScramMechanism.SCRAM_SHA_256, stand_in, password)
            raise AuthenticationFailed(f"unknown user {user!r}")
        if not any(password_matches(m, credential, password) for m, credential in stored):
            raise AuthenticationFailed(f"wrong password for user {user!r}")
        self.user = user
        self.complete = True
        return b""


SaslServer = ScramServer | PlainServer


def new_server(mechanism: str, stand_in_secret: bytes) -> SaslServer:
    """The server for a mechanism lockgate serves (the caller checked it is enabled)."""
    if mechanism == "PLAIN":
        return PlainServer(stand_in_secret)
    scram = ScramMechanism.by_name(mechanism)
    if scram is None:
        raise ValueError(f"SASL mechanism {mechanism} is not served")
    return ScramServer(scram, stand_in_secret)


def failure_message(mechanism: str | None) -> str:
    """Kafka's answer to every failed authentication: it tells nothing about the cause."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


# -- the per-connection state machine -------------------------------------------------------


class SaslStep(enum.Enum):
    HANDSHAKE = 1  # waiting for SaslHandshake (ApiVersions allowed)
    AUTHENTICATE = 2  # mechanism chosen, waiting for tokens
    COMPLETE = 3
    FAILED = 4


@dataclass(slots=True)
class SaslExchange:
    """One connection's SASL progress on a SASL listener. `raw_tokens`: the client used
    SaslHandshake v0, so its tokens come framed only by their length, not as requests."""

    enabled: tuple[str, ...]
    stand_in_secret: bytes
    step: SaslStep = SaslStep.HANDSHAKE
    mechanism: str | None = None
    server: SaslServer | None = None
    raw_tokens: bool = False

    def handshake(self, mechanism: str, version: int) -> bool:
        """Chooses the mechanism; False when it is not enabled (the exchange has failed)."""
        if self.step is not SaslStep.HANDSHAKE:
            step, self.step = self.step, SaslStep.FAILED
            raise IllegalSaslState(f"SaslHandshake in step {step.name}")
        if mechanism not in self.enabled:
            self.step = SaslStep.FAILED
            return False
        self.mechanism = mechanism
        self.server = new_server(mechanism, self.stand_in_secret)
        self.raw_tokens = version == 0
        self.step = SaslStep.AUTHENTICATE
        return True

    def user_of(self, token: bytes) -> str | None:
        if self.step is not SaslStep.AUTHENTICATE or self.server is None:
            return None
        return self.server.user_of(token)

    def evaluate(self, token: bytes, credentials: Mapping[str, ScramCredential] | None) -> bytes:
        """The server's token; raises AuthenticationFailed or IllegalSaslState (then the
        exchange has failed for good)."""
        if self.step is not SaslStep.AUTHENTICATE or self.server is None:
            step = self.step
            self.step = SaslStep.FAILED
            raise IllegalSaslState(f"SASL token in step {step.name}")
        try:
            reply = self.server.evaluate(token, credentials)
        except (AuthenticationFailed, IllegalSaslState):
            self.step = SaslStep.FAILED
            raise
        if self.server.complete:
            self.step = SaslStep.COMPLETE
        return reply

    @property
    def user(self) -> str | None:
        return self.server.user if self.server is not None and self.server.complete else None
