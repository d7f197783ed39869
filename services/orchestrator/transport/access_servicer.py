"""Access gRPC servicer: per-key limits and API keys, proto <-> domain only."""

from __future__ import annotations

from typing import Any

from grpc import aio

from codelab.v1 import access_pb2 as pb
from codelab.v1 import access_pb2_grpc as pb_grpc
from services.orchestrator.session.limits import UserLimits
from services.orchestrator.state.api_keys import ApiKeys, KeyRow

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Access"].full_name


def key_to_proto(row: KeyRow) -> pb.ApiKey:
    key = pb.ApiKey(
        key_id=row.key_id,
        user_id=row.user_id,
        label=row.label,
        prefix=row.prefix,
        created_at=row.created_at.isoformat(),
        source=row.source,
    )
    if row.revoked_at is not None:
        key.revoked_at = row.revoked_at.isoformat()
    return key


class AccessServicer(pb_grpc.AccessServicer):
    """Limits as the gateway shows them; keys as /admin/keys manages them."""

    def __init__(self, limits: UserLimits, keys: ApiKeys) -> None:
        self.limits = limits
        self.keys = keys

    async def GetLimits(
        self, request: pb.LimitsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.LimitsReport:
        report = pb.LimitsReport(user_id=request.user_id)
        for usage in await self.limits.report(request.user_id):
            report.limits.add(
                name=usage.name, used=usage.used, limit=usage.limit, resets_in=usage.resets_in
            )
        return report

    async def CheckKey(
        self, request: pb.CheckKeyRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.CheckKeyResponse:
        check = await self.keys.check(request.key_sha256)
        return pb.CheckKeyResponse(valid=check.valid, user_id=check.user_id, known=check.known)

    async def SeedKeys(
        self, request: pb.SeedKeysRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.SeedKeysResponse:
        added = await self.keys.seed([(k.key_sha256, k.user_id, k.prefix) for k in request.keys])
        return pb.SeedKeysResponse(added=added)

    async def CreateKey(
        self, request: pb.CreateKeyRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.CreatedKey:
        row, key = await self.keys.create(request.user_id, request.label)
        return pb.CreatedKey(key=key_to_proto(row), api_key=key)

    async def ListKeys(
        self, request: pb.ListKeysRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ListKeysResponse:
        rows = await self.keys.list(request.user_id, request.include_revoked)
        return pb.ListKeysResponse(keys=[key_to_proto(r) for r in rows])

    async def RevokeKey(
        self, request: pb.RevokeKeyRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.ApiKey:
        return key_to_proto(await self.keys.revoke(request.key_id))
