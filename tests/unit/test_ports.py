"""Free ports for servers started later (services/common/ports.py): outside the kernel's
ephemeral range, free when picked, never the same one twice in a process."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from services.common import ports


def test_picked_ports_are_outside_the_ephemeral_range_and_never_repeat() -> None:
    ephemeral = ports.ephemeral_ports()
    picked = [ports.free_port_pair(7) for _ in range(200)]
    both = [p for port in picked for p in (port, port + 7)]
    assert len(set(both)) == len(both)  # no port twice, not even as another's pair
    assert not [p for p in both if p in ephemeral]


def test_a_picked_port_can_be_bound() -> None:
    port = ports.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken, socket.socket() as probe:
        taken.bind(("127.0.0.1", 0))
        probe.bind(("127.0.0.1", 0))
        busy, free = taken.getsockname()[1], probe.getsockname()[1]
        probe.close()
        draws = iter([busy, free])
        monkeypatch.setattr(ports, "ephemeral_ports", lambda: range(0))
        monkeypatch.setattr(random, "randrange", lambda low, high: next(draws))
        monkeypatch.setattr(ports, "_given", set())
        assert ports.free_port() == free


def test_no_free_port_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_ports", lambda: range(ports.LOW, ports.HIGH + 8))
    with pytest.raises(RuntimeError, match="no free port"):
        ports.free_port_pair(7)


def test_the_ephemeral_range_falls_back_when_unreadable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL", tmp_path / "missing")
    assert ports.ephemeral_ports() == range(32768, 61000)
