"""The scripted upstream: queue scenarios on it, and call it directly with the ``openai`` SDK.

The direct call is the baseline every mesh figure is compared with: the same model, the
same scenario and pace, minus the runtime in between.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from openai import AsyncOpenAI

SENTENCE = (
    "the runtime streams each token to the IDE as soon as the model sends it while every "
    "event is committed to Postgres so a client can resume after a dropped connection"
)


def split_words(text: str) -> list[str]:
    """``text`` split on whitespace (word lists read better as one string)."""
    return text.split()


WORDS = split_words(SENTENCE)

# The routing prompt asks for JSON and its last user message always contains this text;
# an agent's own call never does. Matching it answers routing at once, in the right shape.
ROUTING_MARKER = "Respond with JSON"
ROUTING_ANSWER = '{"agent": "coder", "confidence": "high", "reason": "benchmark"}'


MODEL = "codelab-scripted"


def words(count: int) -> str:
    """A deterministic answer of ``count`` word tokens (the scripted model streams words)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(count))


class Upstream:
    """Control endpoints of the scripted model plus an ``openai`` client on its /v1."""

    def __init__(self, model_root: str) -> None:
        self.root = model_root.rstrip("/")
        self.http = httpx.AsyncClient(base_url=self.root, timeout=60, trust_env=False)
        # Configured as llmproxy configures its own client, so the baseline is like for like.
        self.openai = AsyncOpenAI(
            base_url=f"{self.root}/v1", api_key="bench", max_retries=0, timeout=60
        )

    async def enqueue(self, scenarios: Sequence[Mapping[str, Any]]) -> None:
        """Queue scenarios, first match wins (see services/scripted_model/scenarios.py)."""
        reply = await self.http.post("/_scripted/scenarios", json={"scenarios": list(scenarios)})
        reply.raise_for_status()

    async def forget_requests(self) -> None:
        """Drop the model's log of received requests (kept for tests; it grows per call)."""
        (await self.http.delete("/_scripted/requests")).raise_for_status()

    async def streams(self) -> list[dict[str, Any]]:
        """When the model's latest streams sent their content: each one's last user text,
        content ``writes`` and the wall-clock ``first_at`` / ``last_at`` of them."""
        reply = await self.http.get("/_scripted/streams")
        reply.raise_for_status()
        return list(reply.json())

    async def forget_streams(self) -> None:
        """Drop the model's log of streams' timing."""
        (await self.http.delete("/_scripted/streams")).raise_for_status()

    async def route_instantly(self) -> None:
        """Answer every routing (classification) call with JSON at no pace."""
        await self.enqueue(
            [{"match": ROUTING_MARKER, "text": ROUTING_ANSWER, "token_delay_ms": 0, "repeat": True}]
        )

    async def close(self) -> None:
        """Close both HTTP clients."""
        await self.http.aclose()
        await self.openai.close()


async def first_token_ms(client: AsyncOpenAI, model: str, content: str) -> float:
    """Milliseconds from request to the first content delta, streaming through the SDK."""
    return (await first_token(client, model, content))[0]


async def first_token(
    client: AsyncOpenAI, model: str, content: str, headers: dict[str, str] | None = None
) -> tuple[float, str]:
    """``first_token_ms`` with request ``headers``, and the ``session_id`` its chunks name
    (CodeLab's gateway names one; "" from any other server)."""
    started = time.perf_counter()
    first: float | None = None
    session = ""
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": content}],
        stream=True,
        extra_headers=headers,
    )
    async for chunk in stream:
        session = session or str((chunk.model_extra or {}).get("session_id") or "")
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
    if first is None:
        raise RuntimeError("the upstream streamed no content")
    return (first - started) * 1000, session


@dataclass(frozen=True)
class Streamed:
    """One streamed completion: content deltas, seconds in all, and when the first and
    the last delta arrived (seconds from the request)."""

    tokens: int
    seconds: float
    first_s: float | None
    last_s: float | None


async def stream_tokens(client: AsyncOpenAI, model: str, content: str) -> Streamed:
    """Stream one completion and time its content deltas."""
    started = time.perf_counter()
    count = 0
    first: float | None = None
    last: float | None = None
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            count += 1
            last = time.perf_counter() - started
            first = last if first is None else first
    return Streamed(count, time.perf_counter() - started, first, last)
