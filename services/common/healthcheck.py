"""A gRPC health probe for container health checks (compose, ``docker run``):
``python -m services.common.healthcheck HOST:PORT [SERVICE]`` exits 0 when the server
reports SERVING, 1 otherwise. It speaks plaintext, like kubelet's gRPC probes: with
TLS on, point it at the service's GRPC_HEALTH_PORT.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

TIMEOUT = 3.0


async def serving(address: str, service: str = "") -> bool:
    """True when ``address`` answers SERVING for ``service``."""
    async with aio.insecure_channel(address) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT
            )
        except grpc.aio.AioRpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m services.common.healthcheck HOST:PORT [SERVICE]", file=sys.stderr)
        return 2
    return 0 if asyncio.run(serving(argv[0], argv[1] if len(argv) == 2 else "")) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
