"""A throwaway certificate authority for ``longboat dev up --secure`` and the tests (issue 18).

``make_ca`` writes a self-signed CA; ``issue`` writes a certificate signed by it for a
subject CN, usable both as a server certificate (its SAN names ``127.0.0.1``/``localhost``
and any ``hosts`` given) and as a client certificate, as a Kafka keystore is. Keys are ECDSA
P-256 in unencrypted PEM files readable by the owner only. Not for production: a real
deployment's certificates come from its own CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CertificateAuthority:
    cert: Path
    key: Path

    def issue(
        self,
        cn: str,
        out_dir: Path,
        *,
        hosts: tuple[str, ...] = (),
        valid_days: int = 365,
        not_before: datetime.datetime | None = None,
        organization: str = "Longboat",
    ) -> Issued:
        """A certificate for ``CN=cn,O=organization`` signed by this CA, in
        ``out_dir/<cn>.pem`` and ``out_dir/<cn>-key.pem``."""
        ca_cert = x509.load_pem_x509_certificate(self.cert.read_bytes())
        ca_key = serialization.load_pem_private_key(self.key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or _now() - datetime.timedelta(minutes=5)
        names: list[x509.GeneralName] = [x509.DNSName("localhost")]
        for h in ("127.0.0.1", *hosts):
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                names.append(x509.DNSName(h))
        cert = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                        x509.NameAttribute(NameOID.COMMON_NAME, cn),
                    ]
                )
            )
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=valid_days))
            .add_extension(x509.SubjectAlternativeName(list(dict.fromkeys(names))), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        issued = Issued(out_dir / f"{cn}.pem", out_dir / f"{cn}-key.pem")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(issued.key, key)
        return issued


def make_ca(out_dir: Path, cn: str = "Longboat dev CA") -> CertificateAuthority:
    """A self-signed CA in ``out_dir/ca.pem`` and ``out_dir/ca-key.pem`` (ten years)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    start = _now() - datetime.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .sign(key, hashes.SHA256())
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(out_dir / "ca.pem", out_dir / "ca-key.pem")
    ca.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca.key, key)
    return ca


def make_signing_key(out_dir: Path, name: str = "jwt-issuer") -> Issued:
    """An ES256 key pair a test or dev token issuer signs bearer tokens with:
    ``out_dir/<name>.pub.pem`` (the listener's ``jwt_public_key_file``) and
    ``out_dir/<name>-key.pem``."""
    key = ec.generate_private_key(ec.SECP256R1())
    out_dir.mkdir(parents=True, exist_ok=True)
    pair = Issued(out_dir / f"{name}.pub.pem", out_dir / f"{name}-key.pem")
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    _write_key(pair.key, key)
    return pair


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
