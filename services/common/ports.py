"""Free ports for servers started later (the bench's and the tests' meshes, a port that
nothing serves).

A port the kernel hands out for ``bind(0)`` is one of its ephemeral ports, the ones it also
gives to outgoing connections as their local end: between the pick and the server's own
bind, any connection opened meanwhile (a pool's to Postgres, a health check) may take it,
and the server never comes up. So ports are drawn outside that range, checked free by
binding them, and never handed out twice by one process (two picks closed before either
server binds would otherwise be free to coincide).
"""

from __future__ import annotations

import random
from pathlib import Path

from services.common.asgi import bind_free_port

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOW, HIGH = 10_000, 30_000
_given: set[int] = set()


def ephemeral_ports() -> range:
    """The ports the kernel hands to outgoing connections as their local end."""
    try:
        low, high = map(int, EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port_pair(offset: int) -> int:
    """A port p with p and p + offset both free now (a gRPC port and its metrics port),
    outside the ephemeral range, neither handed out before by this process."""
    ephemeral = ephemeral_ports()
    for _ in range(500):
        port = random.randrange(LOW, HIGH)
        wanted = {port, port + offset}
        if wanted & _given or any(p in ephemeral for p in wanted):
            continue
        try:
            for p in wanted:
                bind_free_port(port=p).close()
        except OSError:
            continue
        _given.update(wanted)
        return port
    raise RuntimeError("no free port pair")


def free_port() -> int:
    """One free port, as ``free_port_pair`` picks them."""
    return free_port_pair(0)
