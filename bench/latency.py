"""Time to first token: what the mesh adds to the upstream's own latency.

Every path answers the same scenario (20 words, first token at 0 ms: the upstream adds
nothing, so the difference is the runtime). Samples are taken round-robin, one per path
in turn, so a noisy moment on the machine hits every path alike and the ratio holds.
A WebSocket sample is "send user_message -> first assistant_message token" on an open
socket; each session takes ``TURNS_PER_SESSION`` turns, then a fresh one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import openai
from openai import AsyncOpenAI

from bench.mesh import BenchMesh
from bench.report import Figure, num, spread
from bench.sessions import FAILURES
from bench.upstream import MODEL, Upstream, first_token, first_token_ms, words
from clients.python.ide import IdeConnection, connect_ide, is_done

SECTION = "Time to first token"
MARKER = "bench-ttft"
TURNS_PER_SESSION = 10
WARM_UP = 5
"""Rounds taken first and not counted: a path's first calls load templates, catalogs and
connections once per process, which no later turn pays."""
SAMPLE_SECONDS = 30.0
GIVE_UP = 3
NOT_PRESENT = "n/a (endpoint not present)"
V1 = "/v1/chat/completions (gateway, stream, new session per request)"
V1_CONTINUED = "/v1/chat/completions (gateway, stream, X-CodeLab-Session: continuing a session)"
BASELINE = "direct: openai SDK -> scripted model (baseline)"
RAW = "direct: raw HTTP client (httpx, as the SSE row's) -> scripted model"
SSE = "SSE /agent/message/stream, agent_type=coder"
SINGLE = "WebSocket, single-agent mode (MULTI_AGENT_MODE=false)"
MULTI = "WebSocket, multi-agent default (routing call + agent)"
CODER = "WebSocket, agent_type=coder (no routing call)"
ROUTING = "the routing call alone (multi-agent default minus agent_type=coder, at p50)"
ADDED_TARGET = "added <= 5 p50, <= 15 p99"


def ttft_scenario() -> dict[str, object]:
    """20 words, all at once: the upstream adds no pace, so what is measured is the path."""
    return {"match": MARKER, "text": words(20), "token_delay_ms": 0, "repeat": True}


@dataclass
class Path:
    """One way to reach the model, and its samples in milliseconds."""

    name: str
    sample: Callable[[int], Awaitable[float]]
    samples: list[float] = field(default_factory=list)
    errors: int = 0
    streak: int = 0
    """Failures in a row."""


class WebSocketPath:
    """Turns over a held socket; a new session every ``TURNS_PER_SESSION`` turns."""

    def __init__(self, mesh: BenchMesh, label: str, agent_type: str | None) -> None:
        self.mesh, self.label, self.agent_type = mesh, label, agent_type
        self.ide: IdeConnection | None = None

    async def __call__(self, index: int) -> float:
        if self.ide is None or index % TURNS_PER_SESSION == 0:
            await self.close()
            self.ide = await connect_ide(self.mesh.gateway, f"ttft-{self.label}-{index}")
        ide = self.ide
        try:
            started = time.perf_counter()
            await ide.user_message(f"{MARKER} {index}", agent_type=self.agent_type)
            first = await ide.until(lambda e: e["type"] == "assistant_message" or is_done(e))
            elapsed = (time.perf_counter() - started) * 1000
            if is_done(first[-1]):
                raise RuntimeError(f"turn ended without a token: {first[-1]}")
            await ide.until_done()
        except Exception:
            await self.close()  # mid-turn: the next sample starts on a clean session
            raise
        return elapsed

    async def close(self) -> None:
        """Close the current socket, if any."""
        if self.ide is not None:
            await self.ide.close()
            self.ide = None


async def streamed_first_ms(
    http: httpx.AsyncClient,
    url: str,
    body: dict[str, object],
    wanted: Callable[[dict[str, object]], bool],
    headers: dict[str, str] | None = None,
) -> float:
    """POST ``body`` to ``url`` and read the SSE response to its end: milliseconds to the
    first ``data:`` object that is ``wanted``; RuntimeError when none was."""
    started = time.perf_counter()
    first: float | None = None
    async with http.stream("POST", url, json=body, headers=headers) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if first is None and line.startswith("data: {") and wanted(json.loads(line[6:])):
                first = time.perf_counter()
    if first is None:
        raise RuntimeError(f"the stream from {url} carried no first token")
    return (first - started) * 1000


async def sse_sample(http: httpx.AsyncClient, mesh: BenchMesh, index: int) -> float:
    """POST /agent/message/stream -> first ``assistant_message`` frame."""
    body: dict[str, object] = {
        "session_id": f"ttft-sse-{index // TURNS_PER_SESSION}",
        "message": {"type": "user_message", "content": f"{MARKER} {index}", "agent_type": "coder"},
    }
    url = f"{mesh.gateway}/agent/message/stream"
    return await streamed_first_ms(http, url, body, lambda e: e.get("type") == "assistant_message")


def _has_content(chunk: dict[str, object]) -> bool:
    choices = chunk.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else {}
    delta = first.get("delta") if isinstance(first, dict) else None
    return isinstance(delta, dict) and bool(delta.get("content"))


async def raw_sample(http: httpx.AsyncClient, upstream: Upstream, index: int) -> float:
    """The baseline's completion without the SDK: the SSE row's client (httpx) streams it
    from the scripted model. The SDK's own work per request is on the baseline's side of
    every "added" figure; an SSE request pays none of it, so SSE's figure over this row is
    what the mesh adds with the same client on both sides."""
    body: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"{MARKER} {index}"}],
        "stream": True,
    }
    url = f"{upstream.root}/v1/chat/completions"
    headers = {"Authorization": "Bearer bench"}
    return await streamed_first_ms(http, url, body, _has_content, headers)


async def chat_completions_model(http: httpx.AsyncClient, mesh: BenchMesh) -> str | None:
    """The gateway's first model when it serves /v1 (GET /v1/models answers 200)."""
    try:
        reply = await http.get(f"{mesh.gateway}/v1/models")
    except httpx.HTTPError:
        return None
    if reply.status_code != 200:
        return None
    names = [str(m.get("id")) for m in reply.json().get("data") or []]
    # A template starts a new session with that agent (no routing call), like agent_type.
    return "coder" if "coder" in names else (names[0] if names else None)


class ContinuedPath:
    """``/v1`` requests that continue a session (a template and ``X-CodeLab-Session``, as a
    client that keeps talking does); a new session, opened by a request not counted, every
    ``TURNS_PER_SESSION`` turns."""

    def __init__(self, client: AsyncOpenAI, model: str) -> None:
        self.client, self.model = client, model
        self.session: str | None = None

    async def __call__(self, index: int) -> float:
        if self.session is None or index % TURNS_PER_SESSION == 0:
            self.session = None
            self.session = await self._open(index)
        header = {"X-CodeLab-Session": self.session}
        try:
            return (await first_token(self.client, self.model, f"{MARKER} {index}", header))[0]
        except Exception:
            self.session = None  # the next sample starts on a clean session
            raise

    async def _open(self, index: int) -> str:
        """A new session, by a request of its own."""
        session = (await first_token(self.client, self.model, f"{MARKER} open {index}"))[1]
        if not session:
            raise RuntimeError("the gateway named no session")
        return session


async def _take(path: Path, index: int) -> None:
    """One sample; a path failing ``GIVE_UP`` times in a row is sampled no more, so a
    broken path costs seconds, not ``samples`` timeouts."""
    if path.streak >= GIVE_UP:
        return
    try:
        async with asyncio.timeout(SAMPLE_SECONDS):
            path.samples.append(await path.sample(index))
        path.streak = 0
    except (*FAILURES, httpx.HTTPError, openai.OpenAIError, RuntimeError):
        path.errors += 1
        path.streak += 1


async def _enqueue(upstream: Upstream, single: BenchMesh | None) -> None:
    await upstream.route_instantly()
    await upstream.enqueue([ttft_scenario()])
    if single is not None:
        other = Upstream(single.model)
        try:
            await other.enqueue([ttft_scenario()])
        finally:
            await other.close()


async def measure(
    mesh: BenchMesh, single: BenchMesh | None, upstream: Upstream, samples: int
) -> list[Figure]:
    """Every TTFT figure, round-robin over the paths."""
    await _enqueue(upstream, single)
    async with contextlib.AsyncExitStack() as stack:
        http = httpx.AsyncClient(timeout=60, trust_env=False)
        stack.push_async_callback(http.aclose)
        sockets = [WebSocketPath(mesh, "multi", None), WebSocketPath(mesh, "coder", "coder")]
        if single is not None:
            sockets.append(WebSocketPath(single, "single", None))
        for socket in sockets:
            stack.push_async_callback(socket.close)
        paths = [
            Path(BASELINE, lambda i: first_token_ms(upstream.openai, MODEL, f"{MARKER} {i}")),
            Path(MULTI, sockets[0]),
            Path(CODER, sockets[1]),
            *([Path(SINGLE, sockets[2])] if single is not None else []),
            Path(RAW, lambda i: raw_sample(http, upstream, i)),
            Path(SSE, lambda i: sse_sample(http, mesh, i)),
        ]
        model = await chat_completions_model(http, mesh)
        if model is not None:
            gateway = AsyncOpenAI(
                base_url=f"{mesh.gateway}/v1", api_key="bench", max_retries=0, timeout=60
            )
            stack.push_async_callback(gateway.close)
            paths.append(Path(V1, lambda i: first_token_ms(gateway, model, f"{MARKER} {i}")))
            paths.append(Path(V1_CONTINUED, ContinuedPath(gateway, model)))
        for index in range(-WARM_UP, samples):
            if index == 0:  # the warm-up rounds are not counted (a path given up stays so)
                for path in paths:
                    path.samples.clear()
                    if path.streak < GIVE_UP:
                        path.errors = path.streak = 0
            for path in paths:
                await _take(path, index)
    raw = next(path for path in paths if path.name == RAW)
    figures = [_figure(path, paths[0], raw) for path in paths]
    figures.insert(3, _routing(paths[1], paths[2]))
    if single is None:
        figures.insert(4, Figure(SECTION, SINGLE, "n/a (skipped: --no-single-agent)", "ms"))
    if model is None:
        figures.append(Figure(SECTION, V1, NOT_PRESENT, "ms"))
        figures.append(Figure(SECTION, V1_CONTINUED, NOT_PRESENT, "ms"))
    return figures


def _routing(multi: Path, coder: Path) -> Figure:
    """The routing call is one more upstream call: reported apart, as the difference."""
    routing = spread(multi.samples)["p50"] - spread(coder.samples)["p50"]
    return Figure(SECTION, ROUTING, num(routing), "ms", {"p50": routing})


def _figure(path: Path, baseline: Path, raw: Path) -> Figure:
    """A path's spread and, but for the two direct rows, what it adds over the baseline;
    SSE's also over the raw client's (its own client)."""
    stats = spread(path.samples)
    value = f"p50 {num(stats['p50'])} · p95 {num(stats['p95'])} · p99 {num(stats['p99'])}"
    data: dict[str, object] = {**stats, "errors": path.errors}
    target = ""
    if path is not baseline and path is not raw:
        base = spread(baseline.samples)
        added = {k: stats[k] - base[k] for k in ("p50", "p95", "p99")}
        # Percentiles of each path, then their difference: tails of two noisy paths may cross.
        value += f" (added {added['p50']:+.1f} p50 · {added['p99']:+.1f} p99"
        if path.name == SSE and raw.samples:
            over_raw = stats["p50"] - spread(raw.samples)["p50"]
            value += f"; {over_raw:+.1f} p50 over the raw client"
            data["added_over_raw_client"] = over_raw
        value += ")"
        data["added"] = added
        target = "" if path.name == MULTI else ADDED_TARGET
    if path.errors:
        value += f", {path.errors} errors"
    if path.streak >= GIVE_UP:
        value += f" (gave up after {GIVE_UP} failures in a row)"
    return Figure(SECTION, path.name, value, "ms", data, target)
