"""Readiness probes on other mesh services (their standard gRPC health)."""

from __future__ import annotations

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.server import Probe


def health_probe(channel: aio.Channel, service: str = "") -> Probe:
    """A probe that is True while ``service`` on ``channel`` reports SERVING."""
    stub = health_pb2_grpc.HealthStub(channel)

    async def probe() -> bool:
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    return probe
