"""TLS for the mesh's gRPC links (``GRPC_TLS_CERT`` / ``GRPC_TLS_KEY`` / ``GRPC_TLS_CA``).

Unset: plaintext, the embedded default. Certificate and key: every server speaks TLS
and every client checks the server: against the CA or, without one, gRPC's default
roots (grpcio's bundled public CAs, or the PEM file GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names).
With the CA as well: mutual TLS, a server refuses a client that shows no certificate
signed by that CA, and each process presents its one certificate both ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from services.common.errors import SettingsError
from services.common.settings import Settings


def _read(path: Path, name: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SettingsError(f"{name}: cannot read {path}: {error.strerror}") from None
    if b"-----BEGIN" not in data:
        raise SettingsError(f"{name}: {path} is not PEM")
    return data


@dataclass(frozen=True)
class MeshTls:
    """The PEM material of this process."""

    cert: bytes
    key: bytes
    ca: bytes | None

    @classmethod
    def from_settings(cls, settings: Settings) -> MeshTls | None:
        """None when TLS is off; a SettingsError naming the variable for unreadable files."""
        if settings.grpc_tls_cert is None or settings.grpc_tls_key is None:
            return None
        ca = settings.grpc_tls_ca
        return cls(
            cert=_read(settings.grpc_tls_cert, "GRPC_TLS_CERT"),
            key=_read(settings.grpc_tls_key, "GRPC_TLS_KEY"),
            ca=_read(ca, "GRPC_TLS_CA") if ca is not None else None,
        )

    @property
    def mutual(self) -> bool:
        return self.ca is not None

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)], root_certificates=self.ca, require_client_auth=self.mutual
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        # The client shows its certificate only where the server asks (mutual TLS).
        if self.mutual:
            return grpc.ssl_channel_credentials(
                root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
            )
        return grpc.ssl_channel_credentials()
