"""HTTP layer of the scripted model: Starlette routes, SSE streaming and `serve`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import re
import signal
import time
from collections.abc import Iterator, Mapping
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.common.heap import settle_heap
from services.scripted_model.chunks import (
    EventStream,
    build_reply,
    completion_object,
    content_text,
    count_prompt_tokens,
    error_body,
    new_completion_id,
    stream_chunks,
)
from services.scripted_model.config import ScriptedModelSettings
from services.scripted_model.default_behaviour import default_scenario
from services.scripted_model.embeddings import (
    DIMENSIONS,
    embeddings_response,
    normalise_input,
)
from services.scripted_model.errors import EmbeddingInputError, RequestRefused, ScenarioError
from services.scripted_model.scenarios import ScriptedModelState
from services.scripted_model.validation import check_request

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def _error(status: int, message: str, error_type: str | None = None, **kw: Any) -> JSONResponse:
    kind = error_type or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "api_error")
    return JSONResponse(error_body(message, kind, **kw), status_code=status)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def _json_object(request: Request) -> dict[str, Any]:
    try:
        # JSON as the real API reads it: NaN and Infinity are not JSON, though Python's json
        # module reads them. (Not orjson: it reads an integer past 64 bits as a float, and
        # the model would see another number than the one sent.)
        body = json.loads(await request.body(), parse_constant=_not_json)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError included
        raise RequestRefused("We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict):
        raise RequestRefused("The request body must be a JSON object.")
    return body


async def _client_left_during(request: Request, seconds: float) -> bool:
    """Sleep, but stop early (returning True) if the client disconnects meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while (await request.receive())["type"] != "http.disconnect":
                pass
            return True
    return False


def recall(pattern: str, messages: list[dict[str, Any]]) -> str:
    """The first match of ``pattern`` in the messages' text, in order."""
    compiled = re.compile(pattern)
    for message in messages:
        found = compiled.search(content_text(message.get("content")))
        if found:
            return found.group(0)
    return "I do not remember."


def _optional_int(body: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RequestRefused(f"{key} must be a positive integer", key)
        return value
    return None


class _Handlers:
    def __init__(self, state: ScriptedModelState, settings: ScriptedModelSettings) -> None:
        self.state, self.settings = state, settings

    async def chat_completions(self, request: Request) -> Response:
        body = await _json_object(request)
        self.state.record(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestRefused(
                "'messages' is a required property and must be a non-empty array", "messages"
            )
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise RequestRefused("each message must be an object with a string 'role'", "messages")
        check_request(body)
        stream = body.get("stream") or False
        if not isinstance(stream, bool):
            raise RequestRefused("stream must be a boolean", "stream")
        max_tokens = _optional_int(body, "max_completion_tokens", "max_tokens")
        prompt_tokens = count_prompt_tokens(messages, body.get("tools"))
        window = self.state.context_window
        if window is not None and prompt_tokens > window:
            return _error(
                400,
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {prompt_tokens} tokens. Please reduce the length "
                "of the messages.",
                param="messages",
                code="context_length_exceeded",
            )
        last_user: dict[str, Any] = next((m for m in reversed(messages) if m["role"] == "user"), {})
        last_user_text = content_text(last_user.get("content"))
        scenario = self.state.take(last_user_text)
        if scenario is None:
            scenario = default_scenario(body)
        elif scenario.text is None and not scenario.tool_calls and scenario.error is None:
            # A pacing-only (or reasoning-only) scenario keeps the default content.
            fallback = default_scenario(body)
            scenario = dataclasses.replace(
                scenario, text=fallback.text, tool_calls=fallback.tool_calls
            )
        if scenario.recall is not None:
            scenario = dataclasses.replace(scenario, text=recall(scenario.recall, messages))
        if scenario.error is not None:
            err = scenario.error
            response = _error(err.status, err.message, err.type, code=err.code)
            if err.retry_after is not None:
                response.headers["retry-after"] = f"{err.retry_after:g}"
            return response
        reply = build_reply(
            text=scenario.text,
            tool_calls=scenario.tool_calls,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            finish_reason=scenario.finish_reason,
            usage=scenario.usage,
            reasoning=scenario.reasoning,
            reasoning_field=scenario.reasoning_field,
        )
        model = body.get("model") if isinstance(body.get("model"), str) else None
        model = model or self.settings.model_name
        completion_id, created = new_completion_id(), int(time.time())
        first_delay = scenario.first_token_delay_ms / 1000
        if not stream:
            if first_delay and await _client_left_during(request, first_delay):
                return Response(status_code=499)  # nobody is listening any more
            return JSONResponse(completion_object(completion_id, created, model, reply))
        delay_ms = scenario.token_delay_ms
        delay = (self.settings.token_delay_ms if delay_ms is None else delay_ms) / 1000
        pacing = (delay, first_delay or delay, scenario.disconnect_after_chunks)
        on_sent = functools.partial(self.state.record_stream, last_user_text)
        if scenario.raw_chunks is not None:
            raw = [dict(c) for c in scenario.raw_chunks]
            return EventStream(raw, *pacing, on_sent=on_sent)
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        chunks = stream_chunks(
            completion_id,
            created,
            model,
            reply,
            chunk_size=scenario.chunk_size,
            include_usage=include_usage,
        )
        return EventStream(chunks, *pacing, on_sent=on_sent)

    async def models(self, request: Request) -> Response:
        model = {
            "id": self.settings.model_name,
            "object": "model",
            "created": 1_700_000_000,
            "owned_by": "codelab",
        }
        if "model" in request.path_params:
            if request.path_params["model"] != self.settings.model_name:
                return _error(
                    404,
                    f"The model '{request.path_params['model']}' does not exist",
                    code="model_not_found",
                )
            return JSONResponse(model)
        return JSONResponse({"object": "list", "data": [model]})

    async def embeddings(self, request: Request) -> Response:
        body = await _json_object(request)
        try:
            texts = normalise_input(body.get("input"))
        except EmbeddingInputError as exc:
            raise RequestRefused(str(exc), "input") from None
        encoding = body.get("encoding_format") or "float"
        if encoding not in {"float", "base64"}:
            raise RequestRefused("encoding_format must be 'float' or 'base64'", "encoding_format")
        dimensions = _optional_int(body, "dimensions") or DIMENSIONS
        model = body.get("model") if isinstance(body.get("model"), str) else None
        return JSONResponse(
            embeddings_response(
                texts,
                model=model or self.settings.model_name,
                encoding_format=encoding,
                dimensions=min(dimensions, DIMENSIONS),
            )
        )

    async def scenarios(self, request: Request) -> Response:
        if request.method == "DELETE":
            return JSONResponse({"cleared": self.state.clear()})
        if request.method == "GET":
            pending = [dataclasses.asdict(s) for s in self.state.pending()]
            return JSONResponse({"scenarios": pending})
        try:
            payload = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            raise RequestRefused("scenario body is not valid JSON") from None
        if isinstance(payload, dict) and "scenarios" in payload:
            payload = payload["scenarios"]
        items = payload if isinstance(payload, list) else [payload]
        try:
            return JSONResponse({"queued": self.state.enqueue(*items)})
        except ScenarioError as exc:
            raise RequestRefused(str(exc)) from None

    async def requests(self, request: Request) -> Response:
        if request.method == "DELETE":
            return JSONResponse({"cleared": self.state.clear_requests()})
        return JSONResponse(self.state.requests)

    async def streams(self, request: Request) -> Response:
        if request.method == "DELETE":
            return JSONResponse({"cleared": self.state.clear_streams()})
        return JSONResponse(self.state.streams)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})


async def _bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestRefused)
    return _error(400, str(exc), param=exc.param, code=exc.code)


async def _http_exception(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return _error(status, f"{request.method} {request.url.path}: {exc}")


def create_app(
    state: ScriptedModelState | None = None, settings: ScriptedModelSettings | None = None
) -> Starlette:
    """The OpenAI-compatible app; pass a state to drive it from Python."""
    handlers = _Handlers(state or ScriptedModelState(), settings or ScriptedModelSettings())
    routes = [
        Route("/v1/chat/completions", handlers.chat_completions, methods=["POST"]),
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/v1/models/{model:path}", handlers.models, methods=["GET"]),
        Route("/v1/embeddings", handlers.embeddings, methods=["POST"]),
        Route("/_scripted/scenarios", handlers.scenarios, methods=["GET", "POST", "DELETE"]),
        Route("/_scripted/requests", handlers.requests, methods=["GET", "DELETE"]),
        Route("/_scripted/streams", handlers.streams, methods=["GET", "DELETE"]),
        Route("/health", handlers.health, methods=["GET"]),
    ]
    handlers_map = {RequestRefused: _bad_request, HTTPException: _http_exception}
    app = Starlette(routes=routes, exception_handlers=handlers_map)
    app.state.scripted = handlers.state
    return app


class _SignalAwareServer(uvicorn.Server):
    """Stops on SIGTERM/SIGINT and returns normally instead of re-raising the signal."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        installed = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._request_exit)
                installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    def _request_exit(self) -> None:
        # A second signal while draining means "now".
        self.force_exit = self.should_exit
        self.should_exit = True


async def serve(settings: ScriptedModelSettings) -> None:
    """Run the scripted model until SIGTERM/SIGINT."""
    config = uvicorn.Config(
        create_app(settings=settings),
        host=settings.host,
        port=settings.port,
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    settle_heap()  # an upstream that pauses for its collector would blur every latency
    await _SignalAwareServer(config).serve()
