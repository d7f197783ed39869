"""TLS settings fail fast with the variable's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.errors import SettingsError
from services.common.settings import Settings
from services.common.tls import MeshTls
from tests.support.certs import make_certs


def test_tls_is_off_by_default() -> None:
    settings = Settings.from_env({})
    assert not settings.grpc_tls and MeshTls.from_settings(settings) is None


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"GRPC_TLS_CERT": "/c.pem"}, "GRPC_TLS_KEY"),
        ({"GRPC_TLS_KEY": "/k.pem"}, "GRPC_TLS_CERT"),
        ({"GRPC_TLS_CA": "/ca.pem"}, "GRPC_TLS_CA"),
        ({"GATEWAY_TLS_CERT": "/c.pem"}, "GATEWAY_TLS_KEY"),
        ({"GRPC_HEALTH_PORT": "http"}, "GRPC_HEALTH_PORT"),
    ],
)
def test_incomplete_tls_names_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env(env)


def test_unreadable_or_non_pem_files_name_the_variable(tmp_path: Path) -> None:
    files = make_certs(tmp_path)
    missing = Settings.from_env(
        {"GRPC_TLS_CERT": str(tmp_path / "nope.crt"), "GRPC_TLS_KEY": str(files.key)}
    )
    with pytest.raises(SettingsError, match="GRPC_TLS_CERT: cannot read"):
        MeshTls.from_settings(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    wrong_ca = Settings.from_env(
        {
            "GRPC_TLS_CERT": str(files.cert),
            "GRPC_TLS_KEY": str(files.key),
            "GRPC_TLS_CA": str(garbage),
        }
    )
    with pytest.raises(SettingsError, match=r"GRPC_TLS_CA: .* is not PEM"):
        MeshTls.from_settings(wrong_ca)


def test_the_ca_makes_it_mutual(tmp_path: Path) -> None:
    files = make_certs(tmp_path)
    env = {"GRPC_TLS_CERT": str(files.cert), "GRPC_TLS_KEY": str(files.key)}
    one_way = MeshTls.from_settings(Settings.from_env(env))
    mutual = MeshTls.from_settings(Settings.from_env({**env, "GRPC_TLS_CA": str(files.ca)}))
    assert one_way is not None and not one_way.mutual
    assert mutual is not None and mutual.mutual and mutual.ca == files.ca.read_bytes()
