# A test certificate authority and the certificates the TLS tests need, generated into a
# directory as PEM files: the CA, a server certificate for 127.0.0.1/localhost (SAN), a client
# certificate, an expired server and client certificate, and a client certificate from another
# CA. Keys are unencrypted except `client_encrypted.key` (password PASSWORD).
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PASSWORD = "key-secret"
CLIENT_DN = "CN=alice,OU=eng,O=Lockgate Test,C=SE"  # RFC 2253 order, as Kafka prints it


@dataclass(frozen=True)
class Pki:
    directory: Path

    def path(self, name: str) -> str:
        return str(self.directory / name)

    @property
    def ca(self) -> str:
        return self.path("ca.pem")

    @property
    def other_ca(self) -> str:
        return self.path("other-ca.pem")

    def server_settings(self, client_auth: str = "none", prefix: str = "") -> dict[str, str]:
        """Broker properties for a TLS listener (`prefix`: listener.name.<name>.)."""
        return {
            f"{prefix}ssl.keystore.location": self.path("server.pem"),
            f"{prefix}ssl.truststore.location": self.ca,
            f"{prefix}ssl.client.auth": client_auth,
        }


def _name(dn: list[tuple[x509.ObjectIdentifier, str]]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in dn])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    path.write_bytes(data)
    return data


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class _Authority:
    def __init__(self, common_name: str) -> None:
        self.key = _key()
        self.name = _name([(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self,
        subject: x509.Name,
        key: ec.EllipticCurvePrivateKey,
        *,
        server: bool,
        expired: bool = False,
    ) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        if expired:
            start, end = now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)
        else:
            start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                # a broker's certificate is also its client certificate to its peers
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                    if server
                    else [ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        return builder.sign(self.key, hashes.SHA256())


def _client_name() -> x509.Name:
    # subject attributes most general first (as certificates store them); RFC 2253 reverses
    return _name(
        [
            (NameOID.COUNTRY_NAME, "SE"),
            (NameOID.ORGANIZATION_NAME, "Lockgate Test"),
            (NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            (NameOID.COMMON_NAME, "alice"),
        ]
    )


def make_pki(directory: Path) -> Pki:
    """Writes every file into `directory` (created) and returns where they are:
    ca.pem, other-ca.pem; server.pem (key + chain, a keystore), server.crt, server.key;
    client.crt, client.key, client.pem (key + cert), client_encrypted.key (PASSWORD);
    server-expired.pem, client-expired.crt/.key; client-other.crt/.key (other CA);
    server-other.pem (a server certificate from the other CA)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = _Authority("Lockgate Test CA"), _Authority("Some Other CA")
    (directory / "ca.pem").write_bytes(_pem(ca.cert))
    (directory / "other-ca.pem").write_bytes(_pem(other.cert))

    def server(name: str, authority: _Authority, expired: bool = False) -> None:
        key = _key()
        cert = authority.issue(
            _name([(NameOID.COMMON_NAME, "localhost")]), key, server=True, expired=expired
        )
        key_pem = _write_key(directory / f"{name}.key", key)
        (directory / f"{name}.crt").write_bytes(_pem(cert))
        (directory / f"{name}.pem").write_bytes(key_pem + _pem(cert))

    def client(name: str, authority: _Authority, expired: bool = False) -> None:
        key = _key()
        cert = authority.issue(_client_name(), key, server=False, expired=expired)
        key_pem = _write_key(directory / f"{name}.key", key)
        (directory / f"{name}.crt").write_bytes(_pem(cert))
        (directory / f"{name}.pem").write_bytes(key_pem + _pem(cert))
        if name == "client":
            _write_key(directory / "client_encrypted.key", key, PASSWORD)

    server("server", ca)
    server("server-expired", ca, expired=True)
    server("server-other", other)
    client("client", ca)
    client("client-expired", ca, expired=True)
    client("client-other", other)
    return Pki(directory)
