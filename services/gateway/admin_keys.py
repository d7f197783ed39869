"""/admin/keys: create, list and revoke the gateway's API keys (stored hashed by the
orchestrator's Access service). Admins only, as every /admin route."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from clients.python import MeshClient
from codelab.v1 import access_pb2
from services.gateway import admin_bodies as bodies
from services.gateway.auth import Authenticator
from services.gateway.errors import ProtocolError
from services.gateway.keys import MeshKeyChecker
from services.gateway.render import proto_json
from services.gateway.rest import optional_text, read_json


def build_keys_router(
    client: MeshClient, auth: Authenticator, keys: MeshKeyChecker, require_admin: Any
) -> APIRouter:
    router = APIRouter(prefix="/admin/keys", tags=["admin"], dependencies=[Depends(require_admin)])
    access = client.access

    @router.post("", summary="A new API key for a user (shown once)", status_code=201)
    async def create_key(request: Request) -> JSONResponse:
        """Body: ``{user_id, label?}`` -> ``{"api_key": "ck_...", "key": {key_id, ...}}``;
        the key itself is never shown again (only its hash is stored)."""
        body = await read_json(request)
        user = body.get("user_id")
        if not isinstance(user, str) or not user:
            raise ProtocolError("MISSING_REQUIRED_FIELD", "'user_id' (a string) is required")
        created = await access.CreateKey(
            access_pb2.CreateKeyRequest(user_id=user, label=optional_text(body, "label"))
        )
        return JSONResponse(
            {"api_key": created.api_key, "key": proto_json(created.key)}, status_code=201
        )

    @router.get("", summary="Every key: id, user, label, prefix, state (never the key)")
    async def list_keys(include_revoked: str | None = None, user_id: str = "") -> dict[str, Any]:
        reply = await access.ListKeys(
            access_pb2.ListKeysRequest(
                include_revoked=bodies.query_flag(include_revoked, "include_revoked"),
                user_id=user_id,
            )
        )
        return {"keys": [proto_json(k) for k in reply.keys]}

    @router.delete("/{key_id}", summary="Revoke a key (every gateway within its cache TTL)")
    async def revoke_key(key_id: str) -> dict[str, Any]:
        revoked = await access.RevokeKey(access_pb2.RevokeKeyRequest(key_id=key_id))
        keys.forget()  # this gateway refuses the key at once
        return proto_json(revoked)

    return router
