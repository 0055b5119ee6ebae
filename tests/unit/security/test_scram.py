# SCRAM and PLAIN, pure: RFC 7677's SCRAM-SHA-256 example, round trips for both mechanisms,
# and the per-connection SASL state machine (order, mechanism, proofs, replays, unknown users).
from __future__ import annotations

import base64

import pytest

from lockgate.security.scram import (
    MIN_ITERATIONS,
    AuthenticationFailed,
    IllegalSaslState,
    PlainServer,
    SaslExchange,
    SaslStep,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted_password,
    decode_sasl_name,
    derive_credential,
    encode_sasl_name,
    parse_plain,
    password_matches,
    plain_token,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
SECRET = b"stand-in secret for tests"

# RFC 7677 section 3
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return derive_credential(SHA256, "pencil", 4096, RFC_SALT)


def test_rfc7677_server_side() -> None:
    server = ScramServer(SHA256, SECRET, server_nonce=RFC_SERVER_NONCE)
    assert server.user_of(RFC_CLIENT_FIRST) == "user"
    assert server.evaluate(RFC_CLIENT_FIRST, {"SCRAM-SHA-256": rfc_credential()}) == (
        RFC_SERVER_FIRST
    )
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.user == "user"


def test_rfc7677_client_side() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(AuthenticationFailed):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 32))


def test_salted_password_gives_the_same_credential_as_the_password() -> None:
    salted = SHA512.salted_password("secret", b"salt", 5000)
    assert credential_from_salted_password(SHA512, b"salt", salted, 5000) == derive_credential(
        SHA512, "secret", 5000, b"salt"
    )
    credential = derive_credential(SHA512, "secret", 5000)
    assert ScramCredential.from_json(credential.to_json()) == credential
    assert password_matches(SHA512, credential, "secret")
    assert not password_matches(SHA512, credential, "Secret")


def exchange(
    mechanism: ScramMechanism, stored: ScramCredential | None, user: str, password: str
) -> ScramServer:
    server = ScramServer(mechanism, SECRET)
    client = ScramClient(mechanism, user, password)
    credentials = {} if stored is None else {mechanism.mechanism_name: stored}
    server_final = server.evaluate(client.final(server.evaluate(client.first(), credentials)))
    client.verify(server_final)
    return server


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_round_trip(mechanism: ScramMechanism) -> None:
    stored = derive_credential(mechanism, "p,a=ss", 4096)
    server = exchange(mechanism, stored, "us=er,1", "p,a=ss")
    assert server.complete and server.user == "us=er,1"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_wrong_password_fails_at_the_proof(mechanism: ScramMechanism) -> None:
    with pytest.raises(AuthenticationFailed, match="wrong proof"):
        exchange(mechanism, derive_credential(mechanism, "right"), "alice", "wrong")


def test_unknown_user_looks_like_a_known_one_until_the_proof() -> None:
    known = ScramServer(SHA256, SECRET)
    unknown = ScramServer(SHA256, SECRET)
    stored = {"SCRAM-SHA-256": derive_credential(SHA256, "pw")}
    first_known = known.evaluate(ScramClient(SHA256, "alice", "pw").first(), stored)
    first_unknown = unknown.evaluate(ScramClient(SHA256, "mallory", "pw").first(), {})
    shape = [part[:2] for part in first_known.split(b",")]
    assert [part[:2] for part in first_unknown.split(b",")] == shape
    assert b"i=4096" in first_unknown
    # the stand-in salt is stable per name: asking twice cannot tell real from invented
    again = ScramServer(SHA256, SECRET).evaluate(ScramClient(SHA256, "mallory", "x").first(), {})
    assert first_unknown.split(b",")[1] == again.split(b",")[1]
    client = ScramClient(SHA256, "mallory", "pw")
    server = ScramServer(SHA256, SECRET)
    with pytest.raises(AuthenticationFailed, match="unknown user"):
        server.evaluate(client.final(server.evaluate(client.first(), {})))


def test_credential_of_the_other_mechanism_does_not_serve() -> None:
    with pytest.raises(AuthenticationFailed):
        server = ScramServer(SHA512, SECRET)
        client = ScramClient(SHA512, "alice", "pw")
        stored = {"SCRAM-SHA-256": derive_credential(SHA256, "pw")}
        server.evaluate(client.final(server.evaluate(client.first(), stored)))


def test_replayed_client_final_fails() -> None:
    """A client-final recorded from one exchange does not pass in another (its nonce is
    the other exchange's), nor a second time in the same one."""
    stored = {"SCRAM-SHA-256": derive_credential(SHA256, "pw")}
    client = ScramClient(SHA256, "alice", "pw", nonce="fixednonce")
    first = ScramServer(SHA256, SECRET)
    final = client.final(first.evaluate(client.first(), stored))
    first.evaluate(final)
    with pytest.raises(IllegalSaslState):
        first.evaluate(final)
    second = ScramServer(SHA256, SECRET)
    second.evaluate(client.first(), stored)
    with pytest.raises(AuthenticationFailed, match="nonce"):
        second.evaluate(final)


def test_malformed_and_extension_tokens() -> None:
    stored = {"SCRAM-SHA-256": derive_credential(SHA256, "pw")}
    for token in (b"", b"y,,n=a,r=x", b"n,,r=x", b"\xff\xfe", b"n,,n=a=b,r=x"):
        with pytest.raises(AuthenticationFailed):
            ScramServer(SHA256, SECRET).evaluate(token, stored)
    with pytest.raises(AuthenticationFailed, match="delegation token"):
        ScramServer(SHA256, SECRET).evaluate(b"n,,n=alice,r=abc,tokenauth=true", stored)
    # other extensions are ignored, as Kafka does
    assert ScramServer(SHA256, SECRET).evaluate(b"n,,n=alice,r=abc,foo=bar", stored)
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        ScramServer(SHA256, SECRET).evaluate(b"n,a=bob,n=alice,r=abc", stored)
    # after a failure the exchange is over
    server = ScramServer(SHA256, SECRET)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(b"garbage", stored)
    with pytest.raises(IllegalSaslState):
        server.evaluate(ScramClient(SHA256, "alice", "pw").first(), stored)


def test_client_refuses_a_bad_server_first() -> None:
    client = ScramClient(SHA256, "alice", "pw", nonce="abc")
    with pytest.raises(AuthenticationFailed, match="nonce"):
        client.final(b"r=other,s=c2FsdA==,i=4096")
    with pytest.raises(AuthenticationFailed, match="iterations"):
        client.final(b"r=abcdef,s=c2FsdA==,i=10")


def test_sasl_names() -> None:
    assert encode_sasl_name("a=b,c") == "a=3Db=2Cc"
    assert decode_sasl_name("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(AuthenticationFailed):
        decode_sasl_name("a=4Fb")


def test_plain() -> None:
    assert parse_plain(b"\x00alice\x00pw") == ("alice", "pw")
    assert parse_plain(b"alice\x00alice\x00pw") == ("alice", "pw")
    for token in (b"bob\x00alice\x00pw", b"alice\x00pw", b"\x00\x00pw", b"\x00a\x00b\x00c"):
        with pytest.raises(AuthenticationFailed):
            parse_plain(token)
    stored = {"SCRAM-SHA-512": derive_credential(SHA512, "pw", MIN_ITERATIONS)}
    server = PlainServer(SECRET)
    assert server.user_of(plain_token("alice", "pw")) == "alice"
    assert server.evaluate(plain_token("alice", "pw"), stored) == b""
    assert server.complete and server.user == "alice"
    with pytest.raises(IllegalSaslState):
        server.evaluate(plain_token("alice", "pw"), stored)
    with pytest.raises(AuthenticationFailed, match="wrong password"):
        PlainServer(SECRET).evaluate(plain_token("alice", "nope"), stored)
    with pytest.raises(AuthenticationFailed, match="unknown user"):
        PlainServer(SECRET).evaluate(plain_token("mallory", "pw"), {})


def test_exchange_state_machine() -> None:
    stored = {"SCRAM-SHA-256": derive_credential(SHA256, "pw")}
    enabled = ("PLAIN", "SCRAM-SHA-256")
    # a token before the handshake
    early = SaslExchange(enabled, SECRET)
    with pytest.raises(IllegalSaslState):
        early.evaluate(b"n,,n=alice,r=abc", stored)
    assert early.step is SaslStep.FAILED
    # a mechanism that is not enabled
    refused = SaslExchange(enabled, SECRET)
    assert not refused.handshake("SCRAM-SHA-512", 1)
    assert refused.step is SaslStep.FAILED
    # the whole way, then nothing more
    done = SaslExchange(enabled, SECRET)
    assert done.handshake("SCRAM-SHA-256", 1) and not done.raw_tokens
    client = ScramClient(SHA256, "alice", "pw")
    assert done.user_of(client.first()) == "alice"
    server_first = done.evaluate(client.first(), stored)
    assert done.user is None and done.step.name == "AUTHENTICATE"
    client.verify(done.evaluate(client.final(server_first), None))
    assert done.step.name == "COMPLETE" and done.user == "alice"
    with pytest.raises(IllegalSaslState):
        done.handshake("PLAIN", 1)
    # a second handshake after the first
    twice = SaslExchange(enabled, SECRET)
    twice.handshake("PLAIN", 0)
    assert twice.raw_tokens
    with pytest.raises(IllegalSaslState):
        twice.handshake("PLAIN", 1)
    # a bad proof fails the exchange for good
    bad = SaslExchange(enabled, SECRET)
    bad.handshake("SCRAM-SHA-256", 1)
    wrong = ScramClient(SHA256, "alice", "nope")
    with pytest.raises(AuthenticationFailed):
        bad.evaluate(wrong.final(bad.evaluate(wrong.first(), stored)), None)
    assert bad.step is SaslStep.FAILED and bad.user is None
    with pytest.raises(IllegalSaslState):
        bad.evaluate(b"anything", stored)


def test_client_final_may_repeat_the_client_nonce_in_front_as_librdkafka_does() -> None:
    """Kafka only checks that the client-final nonce ends with the exchange's; librdkafka
    sends its own nonce again in front of the combined one, and the proof covers that."""
    import hmac as hmac_module

    stored = derive_credential(SHA256, "pw", 4096, b"salt")
    server = ScramServer(SHA256, SECRET, server_nonce="SRV")
    server_first = server.evaluate(b"n,,n=alice,r=cli", {"SCRAM-SHA-256": stored}).decode()
    without_proof = "c=biws,r=cli" + "cliSRV"
    auth_message = f"n=alice,r=cli,{server_first},{without_proof}".encode()
    salted = SHA256.salted_password("pw", b"salt", 4096)
    client_key = hmac_module.digest(salted, b"Client Key", "sha256")
    signature = hmac_module.digest(SHA256.hash(client_key), auth_message, "sha256")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    assert server.evaluate(final).startswith(b"v=")
    assert server.user == "alice"
