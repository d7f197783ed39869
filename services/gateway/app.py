"""The gateway's HTTP application: routes only; transports live in streaming.py."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest

from clients.python import MeshClient, SessionStream
from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2
from services.common import tracing
from services.common.errors import ErrorKind
from services.common.settings import Settings
from services.gateway import openai_api
from services.gateway.admin import install_admin
from services.gateway.auth import Authenticator
from services.gateway.browsers import install_browser_guards
from services.gateway.errors import TRANSPORT, GatewayError, ProtocolError, error_body
from services.gateway.health import HealthWatch, build_health_router
from services.gateway.held_streams import StreamHold, StreamReader
from services.gateway.keys import KeyCheck, MeshKeyChecker
from services.gateway.lean import EventStream, LeanRoute
from services.gateway.mesh import all_details, describe, retry_headers
from services.gateway.rest import build_router
from services.gateway.seed000 import FORMAT as SEED_000
from services.gateway.seed000 import Seed000Shape
from services.gateway.streaming import sse_events, websocket_session
from services.gateway.translate import (
    json_body,
    normalise_stream_body,
    parse_client_message,
    with_idempotency_key,
)
from services.gateway.ws_auth import authenticate, redact_server_logs

VERSION = "0.1.0"
PLAYGROUND = Path(__file__).with_name("playground")
WS_OPEN = Gauge("codelab_gateway_websockets_open", "IDE WebSocket connections open")
SSE_REQUESTS = Counter("codelab_gateway_sse_requests_total", "SSE message streams started")


def create_app(settings: Settings, client: MeshClient) -> FastAPI:
    """The gateway over ``client``; it keeps no session state of its own (a finished SSE
    turn's stream is held for the session's next request: a connection, see
    held_streams.py)."""
    keys = MeshKeyChecker(client, settings.gateway_api_keys, settings.gateway_key_cache_seconds)
    auth = Authenticator(bool(settings.gateway_api_keys), settings.internal_api_key, keys)
    redact_server_logs()
    client.assign_ids = False  # a transport: the IDE's client_message_id, or none
    client.keep_spare_stream()  # every WebSocket, SSE and /v1 request opens a Stream

    watch = HealthWatch(client.health)
    held = StreamHold()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await keys.seed_quietly()
        watch.start()
        try:
            yield
        finally:
            await held.close()
            await watch.stop()
            await client.close()

    app = FastAPI(
        title="CodeLab Agent Runtime gateway",
        version=VERSION,
        description="IDE-facing WebSocket, SSE and REST over the CodeLab gRPC mesh.",
        lifespan=lifespan,
    )
    app.state.health = watch
    app.state.held_streams = held

    @app.exception_handler(GatewayError)
    async def refused(_: Request, error: GatewayError) -> JSONResponse:
        return error.response()

    @app.exception_handler(grpc.aio.AioRpcError)
    async def mesh_failed(request: Request, error: grpc.aio.AioRpcError) -> JSONResponse:
        status, code, message = describe(error)
        # The session in the path is the one seed 000 shows; a limit adds retry_after.
        session_id = request.path_params.get("session_id")
        details = {**all_details(error), **({"session_id": session_id} if session_id else {})}
        return JSONResponse(
            error_body(code, message, details), status_code=status, headers=retry_headers(details)
        )

    app.add_middleware(KeyCheck, auth=auth)
    install_browser_guards(app, settings.gateway_cors_origins)

    async def opened_with(session_id: str, user: str, first: pb.ClientMessage) -> SessionStream:
        """A new stream of the session whose attach carries ``first``."""
        return await client.open_stream(session_id, user_id=user, first=first)

    async def message_stream(request: Request) -> StreamingResponse:
        """Send one message and stream the answer as SSE until ``event: done``.

        Body: seed 000 ``{session_id, message, message_type, ...}`` or seed 002
        ``{session_id, message: {type, ...}}``. ``?format=seed000``: seed 000's chunks
        (``{"type", "data"}``, ``switch_agent``, ``completion``) instead of the events.
        """
        user = auth.user_for(request.headers)
        shape_name = request.query_params.get("format", "")
        if shape_name not in ("", SEED_000):
            raise ProtocolError("INVALID_MESSAGE", f"unknown format {shape_name!r}; try seed000")
        session_id, raw = normalise_stream_body(json_body(await request.body()))
        message = parse_client_message(raw)
        if not message.HasField("client_message_id"):
            with_idempotency_key(message, request.headers)
        opened = functools.partial(opened_with, session_id, user)
        reader = await held.send(session_id, user, message, opened)
        SSE_REQUESTS.inc()
        frames = sse_events(
            reader,
            session_id,
            heartbeat=settings.sse_heartbeat,
            idle_timeout=settings.agent_stream_timeout,
            shape=Seed000Shape() if shape_name == SEED_000 else None,
            hold=functools.partial(held.give_back, session_id, user),
        )
        return EventStream(frames)

    # The hot routes first: a request is matched against the routes in order.
    app.router.add_api_route(
        "/agent/message/stream",
        message_stream,
        methods=["POST"],
        tags=["agent"],
        route_class_override=LeanRoute,
    )
    openai_api.install(app, client, auth, settings, held)
    app.include_router(build_router(client, auth, deleted=held.forget_session))
    install_admin(app, client, auth, keys)

    app.include_router(build_health_router(client, settings, watch, VERSION))

    @app.get("/playground", include_in_schema=False)
    async def playground() -> RedirectResponse:
        """The web playground (static files; it uses the public WebSocket and REST only)."""
        return RedirectResponse("/playground/")

    app.mount("/playground", StaticFiles(directory=PLAYGROUND, html=True), name="playground")

    @app.get("/metrics", tags=["ops"])
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.websocket("/ws/{session_id}")
    async def ws(websocket: WebSocket, session_id: str) -> None:
        """The IDE protocol of seeds 002 and 004 (JSON text frames); the key as ws_auth.py
        describes (header, subprotocol, first ``auth`` message; ``?token=`` deprecated)."""
        try:
            user = await authenticate(websocket, auth)
        except grpc.aio.AioRpcError:  # the key could not be checked: the mesh is down
            unavailable = TRANSPORT[ErrorKind.UNAVAILABLE].ws_close
            await websocket.close(unavailable, "the key check is unavailable")
            return
        if user is None:
            return
        raw_last = websocket.query_params.get("last_event_id", "-1")
        last_seq = int(raw_last) if raw_last.lstrip("-").isdigit() else -1
        WS_OPEN.inc()
        try:
            await websocket_session(client, websocket, session_id, last_seq=last_seq, user=user)
        finally:
            WS_OPEN.dec()

    @app.get("/sessions/{session_id}/stream", tags=["sessions"])
    async def session_stream(request: Request, session_id: str) -> StreamingResponse:
        """Every event of the session as SSE, live; ``Last-Event-ID: N`` (or ``?last_event_id``)
        first replays each event after N exactly once."""
        user = auth.user_for(request.headers)
        raw = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        last_seq = int(raw) if raw and raw.isdigit() else -1
        await client.runtime.GetSession(
            runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
        )
        stream = await client.open_stream(session_id, last_seq=last_seq, user_id=user)
        frames = sse_events(
            StreamReader(stream),
            session_id,
            heartbeat=settings.sse_heartbeat,
            idle_timeout=settings.agent_stream_timeout,
            follow=True,
        )
        return EventStream(frames)

    tracing.instrument_app(app)
    return app
