"""The OpenAI-compatible API (seed 003 §8): ``GET /v1/models``, ``POST /v1/chat/completions``.

Any OpenAI client can use the runtime as a model. The contract:

* ``model`` is an agent template (``GET /v1/models``: coder, ask, universal, ...) or a
  session id. A template starts a NEW session ``oai-<uuid>``: the system (or developer)
  messages become its system prompt and the user messages after the last assistant
  message, joined by a blank line, are sent with ``agent_type`` = the template (no
  routing). Earlier turns are NOT replayed: the runtime keeps the history itself, so
  continue by session id instead of resending it. With an ``Idempotency-Key`` header the
  new session is ``oai-<hash of the user and the key>``: a retried first request reaches
  the session its first try opened and replays that answer instead of opening another.
* The session id comes back in the ``X-CodeLab-Session`` header and in a top-level
  ``session_id`` field of the completion and of every chunk (the SDK keeps it in
  ``model_extra``). ``model`` = that id continues the session (routing picks the
  agent); ``model`` = a template plus the request header ``X-CodeLab-Session`` continues
  it with that agent. Either way only the messages after the last assistant message are
  new input, and system messages there are ignored (the prompt is fixed at creation).
* A runtime ``tool_call`` ends the completion with ``finish_reason: "tool_calls"``. The
  client answers with ``role: "tool"`` messages: ``content`` that parses as JSON is the
  result, anything else is sent as a string.
* A call that needs a human decision carries ``codelab_approval: {reason, decisions}`` in
  its tool-call object. The client decides with a tool message whose content is
  ``{"codelab_decision": "approve"|"reject"|"edit", "arguments": {...}, "feedback": "..."}``
  (``arguments``: the edited ones, for edit). Approve/edit answer with the same call
  again, now to be run; reject lets the model go on. A plain result for such a call is
  refused (400) — the approval is never implied.
* Errors are OpenAI error bodies ``{"error": {message, type, param, code}}`` with the
  spec's error code as ``code``, always (LLM_TIMEOUT 504, LLM_PROXY_UNAVAILABLE 503, client
  mistakes 400 MISSING_REQUIRED_FIELD / INVALID_MESSAGE, a wrong key 401 UNAUTHORIZED, an
  unknown model 404 AGENT_NOT_FOUND, a foreign session 404 SESSION_NOT_FOUND, the rest
  502); when streaming, one ``data: {"error": ...}`` frame, then ``data: [DONE]``.
* ``usage`` is what llmproxy recorded for the session while the request ran (routing
  calls included); 0s if llmproxy cannot be asked. Request fields other than ``model``,
  ``messages``, ``stream`` and ``stream_options`` (tools, temperature...) are ignored: the
  template decides. Plan approvals and agent switches have no OpenAI form: the non-stream
  response lists them in ``codelab_events``; decide plans over the IDE API.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from clients.python import MeshClient, SessionStream
from codelab.v1 import common_pb2 as pb
from codelab.v1 import llmproxy_pb2, runtime_pb2
from services.common.settings import Settings
from services.gateway.auth import Authenticator
from services.gateway.errors import OpenAIError
from services.gateway.held_streams import StreamHold
from services.gateway.lean import EventStream, LeanRoute
from services.gateway.openai_render import (
    FAILURES,
    ChunkWriter,
    Header,
    JsonObject,
    Output,
    ToolCallOut,
    completion_object,
    failure,
    new_completion_id,
    run_legs,
    stream_frames,
)
from services.gateway.translate import (
    IDEMPOTENCY_HEADER,
    parse_client_message,
    with_idempotency_key,
)

SESSION_HEADER = "X-CodeLab-Session"
SYSTEM_ROLES = frozenset({"system", "developer"})
TITLE_LENGTH = 80
TEMPLATES_TTL = 5.0
"""Seconds a listing of the templates answers "is this model a template"."""


def content_text(content: Any) -> str:
    """A message's ``content``: a string or a list of ``{"type": "text", "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return ""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """The fields of a chat-completions body the runtime honours."""

    model: str
    messages: list[JsonObject]
    system: str
    stream: bool
    include_usage: bool


def parse_body(raw: bytes) -> ChatRequest:
    """The request, or a 400."""
    try:
        body = json.loads(raw)
    except ValueError as error:  # UnicodeDecodeError too: bytes that are not UTF-8
        raise OpenAIError(400, f"Invalid JSON body: {error}", "INVALID_MESSAGE") from error
    if not isinstance(body, dict):
        raise OpenAIError(400, "the body must be a JSON object", "INVALID_MESSAGE")
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not model:
        raise OpenAIError(
            400, "'model' must be a non-empty string", "MISSING_REQUIRED_FIELD", "model"
        )
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(
            400, "'messages' must be a non-empty list", "MISSING_REQUIRED_FIELD", "messages"
        )
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise OpenAIError(400, "each message needs a 'role'", "MISSING_REQUIRED_FIELD", "messages")
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    system = [content_text(m.get("content")) for m in messages if m["role"] in SYSTEM_ROLES]
    return ChatRequest(
        model, messages, "\n\n".join(system), body.get("stream") is True, include_usage
    )


def new_input(messages: list[JsonObject]) -> list[JsonObject]:
    """The messages after the last assistant message: what the client adds this time."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    return messages[last + 1 :]


def tool_answer(message: JsonObject) -> pb.ClientMessage:
    """A ``role: "tool"`` message -> tool_result, or hitl_decision for ``codelab_decision``."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise OpenAIError(
            400, "a tool message needs 'tool_call_id'", "MISSING_REQUIRED_FIELD", "messages"
        )
    text = content_text(message.get("content"))
    try:
        result: Any = json.loads(text)
    except json.JSONDecodeError:
        result = text
    if isinstance(result, dict) and "codelab_decision" in result:
        decision = {
            "type": "hitl_decision",
            "call_id": call_id,
            "decision": result["codelab_decision"],
            "modified_arguments": result.get("arguments"),
            "feedback": result.get("feedback"),
        }
        return parse_client_message({k: v for k, v in decision.items() if v is not None})
    return parse_client_message({"type": "tool_result", "call_id": call_id, "result": result})


def client_messages(
    added: list[JsonObject], agent_type: str | None, *, new_session: bool
) -> list[pb.ClientMessage]:
    """The runtime inputs for the new messages: tool answers in order, then the user text."""
    out: list[pb.ClientMessage] = []
    texts: list[str] = []
    for message in added:
        if message["role"] == "tool":
            if new_session:
                hint = f"tool messages continue a session: model=<session_id> or {SESSION_HEADER}"
                raise OpenAIError(400, hint, "MISSING_REQUIRED_FIELD", "messages")
            out.append(tool_answer(message))
        elif message["role"] == "user":
            texts.append(content_text(message.get("content")))
    text = "\n\n".join(t for t in texts if t.strip())
    if text:
        user: JsonObject = {"type": "user_message", "content": text, "agent_type": agent_type}
        out.append(parse_client_message({k: v for k, v in user.items() if v is not None}))
    if not out:
        problem = "no user or tool message after the last assistant message"
        raise OpenAIError(400, problem, "MISSING_REQUIRED_FIELD", "messages")
    return out


class TemplateNames:
    """The agent templates' names as last listed: a chat request's ``model`` is looked up
    here instead of asking the orchestrator each time (a round trip before the first token)."""

    def __init__(self, ttl: float = TEMPLATES_TTL) -> None:
        self.ttl = ttl
        self._names: frozenset[str] = frozenset()
        self._at = 0.0  # nothing listed yet: has() is False while _names is empty

    def update(self, names: list[str]) -> list[str]:
        self._names, self._at = frozenset(names), time.monotonic()
        return names

    def has(self, name: str) -> bool:
        """Listed, and the listing is at most ``ttl`` seconds old."""
        return name in self._names and time.monotonic() - self._at < self.ttl

    def seen(self, name: str) -> bool:
        """In the last listing, however old."""
        return name in self._names


@dataclass
class Target:
    """The session a request talks to and how its user text is routed."""

    session_id: str
    agent_type: str | None
    """None: addressed as ``model`` = the session id (routing picks the agent)."""
    new: bool

    @property
    def gone(self) -> OpenAIError | None:
        """The answer when the orchestrator finds no such session (deleted since
        ``resolve``, as through another gateway while this one held its stream): what
        ``resolve`` says now of a session named as the model; None keeps the
        orchestrator's own SESSION_NOT_FOUND."""
        return unknown_model(self.session_id) if self.agent_type is None else None


def unknown_model(model: str) -> OpenAIError:
    message = f"The model '{model}' is neither an agent template nor your session"
    return OpenAIError(404, message, "AGENT_NOT_FOUND", "model")


def as_resolved(error: OpenAIError, gone: OpenAIError | None) -> OpenAIError:
    """The orchestrator's SESSION_NOT_FOUND as ``resolve`` would answer it (``gone``)."""
    return gone if gone is not None and error.code == "SESSION_NOT_FOUND" else error


async def resolved(outputs: AsyncIterator[Output], gone: OpenAIError) -> AsyncIterator[Output]:
    """``outputs`` with a SESSION_NOT_FOUND failure answered ``gone``."""
    async for out in outputs:
        yield as_resolved(out, gone) if isinstance(out, OpenAIError) else out


def install(
    app: FastAPI, client: MeshClient, auth: Authenticator, settings: Settings, held: StreamHold
) -> None:
    """The ``/v1`` routes over ``client``; like the rest of the gateway, stateless but for
    ``held``: a request that read its turn to the end leaves its session's stream there,
    and the session's next request (``/v1`` or SSE, same user) takes it: no attach, and no
    ownership check of its own (the held stream's attach checked). Chat completions is a
    hot route: it goes on the app's own router (matched in the order routes are added,
    and run lean: an included router's routes run FastAPI's full request handler); the
    others in an included router."""
    router = APIRouter(prefix="/v1", tags=["openai"])
    runtime = client.runtime
    # Templates carry no creation time; the gateway's start is the honest stand-in.
    started = int(time.time())

    known = TemplateNames()

    async def templates() -> list[str]:
        reply = await runtime.ListAgents(runtime_pb2.ListAgentsRequest())
        return known.update([agent.agent_type for agent in reply.agents])

    async def is_template(model: str) -> bool:
        """Against the last listing while it is fresh; a miss lists again (a new
        template is found at once, a removed one refused within ``TEMPLATES_TTL``)."""
        return known.has(model) or model in await templates()

    def model_entry(name: str) -> JsonObject:
        return {"id": name, "object": "model", "created": started, "owned_by": "codelab"}

    async def owned(session_id: str, user: str, refusal: OpenAIError) -> None:
        """``refusal`` (a 404) unless the session exists and is the caller's."""
        try:
            await runtime.GetSession(
                runtime_pb2.GetSessionRequest(session_id=session_id, user_id=user)
            )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            raise refusal from error

    async def resolve(model: str, headers: Mapping[str, str], user: str) -> Target:
        header_session = headers.get(SESSION_HEADER.lower())
        if not known.seen(model) and held.holds(model, user):
            return Target(model, None, new=False)  # its held stream's attach checked it
        if not await is_template(model):
            await owned(model, user, unknown_model(model))
            return Target(model, None, new=False)
        if header_session:
            if not held.holds(header_session, user):
                unknown = f"{SESSION_HEADER}: '{header_session}' is not your session"
                await owned(
                    header_session, user, OpenAIError(404, unknown, "SESSION_NOT_FOUND", "model")
                )
            return Target(header_session, model, new=False)
        key = headers.get(IDEMPOTENCY_HEADER)
        if key:  # a retried first request reaches the session its first try opened
            digest = hashlib.sha256(f"{user}\0{key}".encode()).hexdigest()[:32]
            return Target(f"oai-{digest}", model, new=True)
        return Target(f"oai-{uuid.uuid4().hex}", model, new=True)

    async def spent(session_id: str) -> tuple[int, int]:
        try:
            row = await client.llmproxy.GetUsage(
                llmproxy_pb2.GetUsageRequest(session_id=session_id)
            )
        except grpc.aio.AioRpcError:
            return 0, 0  # usage is informative; its absence must not fail the answer
        return row.prompt_tokens, row.completion_tokens

    @router.get("/models", summary="The agent templates, as OpenAI models")
    async def list_models(request: Request) -> Response:
        try:
            auth.user_for(request.headers)
            names = await templates()
        except FAILURES as error:
            return failure(error).response()
        return JSONResponse({"object": "list", "data": [model_entry(n) for n in names]})

    @router.get("/models/{model_id}", summary="One agent template, as an OpenAI model")
    async def get_model(request: Request, model_id: str) -> Response:
        try:
            auth.user_for(request.headers)
            if model_id not in await templates():
                raise OpenAIError(404, f"The model '{model_id}' does not exist", "AGENT_NOT_FOUND")
        except FAILURES as error:
            return failure(error).response()
        return JSONResponse(model_entry(model_id))

    async def chat_completions(request: Request) -> Response:
        """See the module docstring for how sessions, tool calls and approvals map."""
        gone: OpenAIError | None = None
        try:
            user = auth.user_for(request.headers)
            chat = parse_body(await request.body())
            target = await resolve(chat.model, request.headers, user)
            gone = target.gone
            added = new_input(chat.messages)
            inputs = client_messages(added, target.agent_type, new_session=target.new)
            if inputs[-1].HasField("user_message"):
                with_idempotency_key(inputs[-1], request.headers)
            # What the session used before, when the answer reports usage at all.
            reported = chat.include_usage or not chat.stream
            before = await spent(target.session_id) if reported and not target.new else (0, 0)
            # A new session is created by the stream's attach, with its title and prompt.
            title = inputs[-1].user_message.content[:TITLE_LENGTH] if target.new else ""

            async def opened(first: pb.ClientMessage) -> SessionStream:
                # The first input goes with the attach: a new session's model request
                # leaves while its attach runs.
                return await client.open_stream(
                    target.session_id,
                    user_id=user,
                    title=title,
                    system_prompt=chat.system if target.new else "",
                    first=first,
                )

            reader = await held.send(target.session_id, user, inputs[0], opened)
        except FAILURES as error:
            return as_resolved(failure(error), gone).response()
        head = Header(new_completion_id(), int(time.time()), chat.model, target.session_id)
        headers = {SESSION_HEADER: target.session_id}
        extras: list[JsonObject] = []

        async def reopen(after: int) -> SessionStream:
            return await client.open_stream(target.session_id, last_seq=after, user_id=user)

        legs = run_legs(reader, inputs, extras, settings.agent_stream_timeout, reopen)
        if gone is not None:
            legs = resolved(legs, gone)

        def finish(read_to_the_end: bool) -> None:
            """Hold the stream for the session's next request, or close it."""
            if read_to_the_end:
                reader.start()  # what comes while it is held is read and dropped
                if held.give_back(target.session_id, user, reader):
                    return
            reader.close()

        async def usage() -> JsonObject:
            prompt, completion = await spent(target.session_id)
            prompt, completion = prompt - before[0], completion - before[1]
            return {"prompt_tokens": prompt, "completion_tokens": completion,
                    "total_tokens": prompt + completion}  # fmt: skip

        if chat.stream:
            frames = stream_frames(legs, ChunkWriter(head, chat.include_usage), usage, finish)
            return EventStream(frames, headers)
        outputs: list[Output] = []
        read_to_the_end = False
        try:
            outputs = [out async for out in legs]
            read_to_the_end = not any(isinstance(out, OpenAIError) for out in outputs)
        finally:
            finish(read_to_the_end)
        for out in outputs:
            if isinstance(out, OpenAIError):
                response = out.response()
                response.headers.update(headers)
                return response
        text = "".join(out for out in outputs if isinstance(out, str))
        calls = [out for out in outputs if isinstance(out, ToolCallOut)]
        return JSONResponse(
            completion_object(head, text, calls, await usage(), extras), headers=headers
        )

    app.router.add_api_route(
        router.prefix + "/chat/completions",
        chat_completions,
        methods=["POST"],
        tags=["openai"],
        summary="Talk to an agent as if it were a model",
        route_class_override=LeanRoute,
    )
    app.include_router(router)
