"""The REST surface of seeds 000 §E, 001 §4 and 002: thin handlers over the mesh's RPCs.

Every handler takes the caller from ``Authenticator.user_for`` and passes it as
``user_id``, so the orchestrator answers another user's session with
SESSION_NOT_FOUND (404). Errors are rendered by the app's exception handlers;
proto -> JSON lives in render.py, IDE message parsing in translate.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from clients.python import MeshClient
from codelab.v1 import access_pb2, common_pb2, hitl_pb2, llmproxy_pb2, runtime_pb2
from services.gateway import render
from services.gateway.auth import Authenticator
from services.gateway.errors import ProtocolError
from services.gateway.translate import (
    json_body,
    normalise_stream_body,
    parse_client_message,
    with_idempotency_key,
)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
ERROR = {"description": 'Error: `{"type":"error","content","error_code","details"}`'}
ERRORS: dict[int | str, dict[str, Any]] = {
    status: ERROR for status in (400, 401, 403, 404, 429, 503)
}
LimitParam = Annotated[str | None, Query(description=f"1..{MAX_LIMIT}, default {DEFAULT_LIMIT}")]


def parse_limit(raw: str | None) -> int:
    """``?limit=`` as an int in 1..MAX_LIMIT; anything else is the client's mistake (400)."""
    if raw is None:
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_LIMIT:
        raise ProtocolError(
            "MISSING_REQUIRED_FIELD",
            f"limit must be an integer from 1 to {MAX_LIMIT}, got {raw!r}",
        )
    return value


async def read_json(request: Request, *, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}`` when ``optional``."""
    raw = await request.body()
    if optional and not raw.strip():
        return {}
    body = json_body(raw)
    if not isinstance(body, dict):
        raise ProtocolError("INVALID_MESSAGE", "the body must be a JSON object")
    return body


def optional_text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ProtocolError("MISSING_REQUIRED_FIELD", f"'{name}' must be a string")
    return value


def build_router(
    client: MeshClient, auth: Authenticator, deleted: Callable[[str], None] = lambda _: None
) -> APIRouter:
    """Routes over ``client``; they keep no state of their own (``deleted`` is told of each
    session deleted here: the gateway's held streams of it close)."""
    router = APIRouter(responses=ERRORS)
    runtime = client.runtime

    async def owned_sessions(user: str) -> set[str]:
        reply = await runtime.ListSessions(
            runtime_pb2.ListSessionsRequest(user_id=user, limit=MAX_LIMIT)
        )
        return {s.session_id for s in reply.sessions}

    async def require_session(session_id: str, user: str) -> None:
        """404 SESSION_NOT_FOUND unless the session exists and is the caller's."""
        await runtime.GetSession(runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user))

    async def submit(session_id: str, user: str, message: common_pb2.ClientMessage) -> str:
        reply = await runtime.Submit(
            runtime_pb2.SubmitRequest(session_id=session_id, user_id=user, message=message)
        )
        return reply.status or "accepted"

    @router.get("/agents", tags=["agents"], summary="List the registered agents")
    async def list_agents(request: Request) -> list[dict[str, Any]]:
        auth.user_for(request.headers)
        reply = await runtime.ListAgents(runtime_pb2.ListAgentsRequest())
        return [render.agent(a) for a in reply.agents]

    @router.get(
        "/agents/{session_id}/current", tags=["agents"], summary="The session's current agent"
    )
    async def current_agent(request: Request, session_id: str) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        reply = await runtime.GetCurrentAgent(
            runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
        )
        return render.current_agent(reply)

    @router.get("/sessions", tags=["sessions"], summary="The caller's active sessions")
    async def list_sessions(request: Request) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        reply = await runtime.ListSessions(runtime_pb2.ListSessionsRequest(user_id=user))
        return {"sessions": [render.session(s) for s in reply.sessions]}

    @router.post("/sessions", tags=["sessions"], summary="Create a session", status_code=201)
    async def create_session(request: Request) -> dict[str, Any]:
        """Body (optional): ``{session_id?, system_prompt?, title?, busy_policy?, metadata?}``;
        busy_policy (enqueue | reject | interrupt) says what a user_message does mid-turn;
        metadata (an object: user_preferences, pending_tasks, ...) reaches every agent's
        prompt (seed 000's context hand-over)."""
        user = auth.user_for(request.headers)
        body = await read_json(request, optional=True)
        metadata = body.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise ProtocolError("MISSING_REQUIRED_FIELD", "'metadata' must be an object")
        created = await runtime.CreateSession(
            runtime_pb2.CreateSessionRequest(
                session_id=optional_text(body, "session_id"),
                system_prompt=optional_text(body, "system_prompt"),
                title=optional_text(body, "title"),
                busy_policy=optional_text(body, "busy_policy"),
                user_id=user,
                metadata_json=json.dumps(metadata) if metadata is not None else None,
            )
        )
        return {
            "session_id": created.session_id,
            "created_at": created.created_at,
            "status": "created",
        }

    @router.get(
        "/sessions/{session_id}/history", tags=["sessions"], summary="The session's messages"
    )
    async def history(request: Request, session_id: str) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        reply = await runtime.GetHistory(
            runtime_pb2.GetHistoryRequest(session_id=session_id, user_id=user)
        )
        return render.history(reply)

    @router.get(
        "/sessions/{session_id}/records",
        tags=["sessions"],
        summary="Tool executions, sources read and artifacts produced (seed 003)",
    )
    async def records(request: Request, session_id: str) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        reply = await runtime.GetSessionRecords(
            runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
        )
        return render.proto_json(reply)

    @router.delete("/sessions/{session_id}", tags=["sessions"], summary="Soft-delete a session")
    async def delete_session(request: Request, session_id: str) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        reply = await runtime.DeleteSession(
            runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
        )
        deleted(session_id)
        return {"session_id": reply.session_id or session_id, "deleted": reply.deleted}

    @router.post(
        "/sessions/{session_id}/cancel",
        tags=["sessions"],
        summary="Stop the running turn",
        status_code=202,
    )
    async def cancel(request: Request, session_id: str) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        reply = await runtime.Cancel(
            runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
        )
        return {"status": reply.status}

    @router.get(
        "/sessions/{session_id}/pending-approvals",
        tags=["sessions"],
        summary="Tool and plan approvals waiting for the user",
    )
    async def pending_approvals(request: Request, session_id: str) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        reply = await runtime.ListPendingApprovals(
            runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
        )
        items = [render.pending_approval(p) for p in reply.pending_approvals]
        return {"session_id": reply.session_id or session_id, "pending_approvals": items}

    @router.get(
        "/events/metrics/session/{session_id}", tags=["events"], summary="A session's LLM usage"
    )
    async def session_metrics(request: Request, session_id: str) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        # llmproxy knows no owners: the orchestrator decides whether the caller may look.
        session = await runtime.GetSession(
            runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
        )
        reply = await client.llmproxy.GetUsage(llmproxy_pb2.GetUsageRequest(session_id=session_id))
        offered, everything = session.tool_schema_tokens_offered, session.tool_schema_tokens_all
        return {
            **render.usage(reply),
            # Tool search's context thrift: schema tokens offered vs every allowed tool.
            "tool_schema_tokens": {
                "offered": offered,
                "all_allowed": everything,
                "saved": everything - offered,
            },
        }

    @router.get(
        "/events/metrics/sessions",
        tags=["events"],
        summary="LLM usage per session, most recently active first",
    )
    async def sessions_metrics(request: Request, limit: LimitParam = None) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        count = parse_limit(limit)
        if not user:
            reply = await client.llmproxy.ListUsage(llmproxy_pb2.ListUsageRequest(limit=count))
            return {"sessions": [render.usage(u) for u in reply.sessions]}
        # ListUsage has no owner filter: take the widest page and keep the caller's sessions.
        owned, reply = await asyncio.gather(
            owned_sessions(user),
            client.llmproxy.ListUsage(llmproxy_pb2.ListUsageRequest(limit=MAX_LIMIT)),
        )
        mine = [render.usage(u) for u in reply.sessions if u.session_id in owned]
        return {"sessions": mine[:count]}

    @router.get(
        "/events/metrics",
        tags=["events"],
        summary="The caller's usage against its limits; for admins, LLM usage totals and events",
    )
    async def metrics(request: Request) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        report = await client.access.GetLimits(access_pb2.LimitsRequest(user_id=user))
        mine = {"user_id": user, "limits": render.limits(report)}
        if not auth.is_admin(request.headers):
            return mine
        usage, stats = await asyncio.gather(
            client.llmproxy.GetUsage(llmproxy_pb2.GetUsageRequest()),
            runtime.GetEventStats(runtime_pb2.EventStatsRequest()),
        )
        return {**render.totals(usage), **render.event_stats(stats), **mine}

    @router.get("/events/audit-log", tags=["events"], summary="HITL decisions and timeouts")
    async def audit_log(
        request: Request,
        session_id: str | None = None,
        event_type: str | None = None,
        limit: LimitParam = None,
    ) -> dict[str, Any]:
        user = auth.user_for(request.headers)
        count = parse_limit(limit)
        query = hitl_pb2.ListAuditRequest(
            session_id=session_id or "", event_type=event_type or "", limit=count
        )
        if user and session_id:
            await require_session(session_id, user)
        if not user or session_id:
            reply = await client.hitl.ListAudit(query)
            return {"entries": [render.audit_entry(e) for e in reply.entries]}
        # hitl has no owner filter: take the widest page and keep the caller's sessions.
        query.limit = MAX_LIMIT
        owned, reply = await asyncio.gather(owned_sessions(user), client.hitl.ListAudit(query))
        mine = [render.audit_entry(e) for e in reply.entries if e.session_id in owned]
        return {"entries": mine[:count]}

    @router.get("/events/stats", tags=["events"], summary="Event log statistics (admins only)")
    async def event_stats(request: Request) -> dict[str, Any]:
        auth.user_for(request.headers)
        auth.require_admin(request.headers)
        return render.event_stats(await runtime.GetEventStats(runtime_pb2.EventStatsRequest()))

    @router.post(
        "/agent/message",
        tags=["agent"],
        summary="Send a message; the answer streams on /ws/{session_id}",
        status_code=202,
    )
    async def agent_message(request: Request) -> dict[str, Any]:
        """Body: ``{session_id, message | content, message_type?}`` (seeds 000 and 001)."""
        user = auth.user_for(request.headers)
        body = await read_json(request)
        if "message" not in body and "content" in body:
            body["message"] = body["content"]
        session_id, raw = normalise_stream_body(body)
        message = with_idempotency_key(parse_client_message(raw), request.headers)
        return {"status": await submit(session_id, user, message)}

    @router.post(
        "/agent/tool_result",
        tags=["agent"],
        summary="Return a tool's result; the turn goes on on /ws/{session_id}",
        status_code=202,
    )
    async def agent_tool_result(request: Request) -> dict[str, Any]:
        """Body: ``{session_id, call_id | tool_call_id, result, error?}`` (seed 001 §4.3)."""
        user = auth.user_for(request.headers)
        body = await read_json(request)
        if not {"result", "tool_result", "error"} & body.keys():
            raise ProtocolError(
                "MISSING_REQUIRED_FIELD", "tool_result requires 'result' or 'error'"
            )
        fields = {k: v for k, v in body.items() if k != "session_id"}
        session_id, raw = normalise_stream_body(
            {"session_id": body.get("session_id"), "message": {**fields, "type": "tool_result"}}
        )
        return {"status": await submit(session_id, user, parse_client_message(raw))}

    return router
