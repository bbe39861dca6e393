"""A throwaway certificate authority, and certificates it signs, for TLS tests."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@attrs.frozen
class Issued:
    """A certificate and its key as PEM files."""

    certfile: str
    keyfile: str


@attrs.frozen
class ThrowawayCA:
    """A CA (its certificate as ``cafile``), a server certificate for
    127.0.0.1/localhost, and a client certificate, all signed by it."""

    cafile: str
    server: Issued
    client: Issued


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def write_pem(
    certfile: Path, keyfile: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Issued:
    """Write ``cert`` and ``key`` (PKCS#8, unencrypted) as PEM files."""
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Issued(str(certfile), str(keyfile))


def make_ca(directory: Path, name: str = "uamp test CA") -> ThrowawayCA:
    """A new CA in ``directory`` with a server and a client certificate."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cafile = directory / "ca.pem"
    cafile.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    def leaf(common: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName]) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return write_pem(directory / f"{common}.pem", directory / f"{common}.key", cert, key)

    server = leaf(
        "localhost",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    return ThrowawayCA(str(cafile), server, client)
