"""Completions with usage accounting: every call, success or failure, is recorded."""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import Counter, Histogram

from services.common.errors import ServiceError
from services.common.model_stream import ModelFinished, ModelOutput
from services.llmproxy.store import RequestRecord, UsageStore
from services.llmproxy.upstream import CompletionRequest, Upstream

TTFT = Histogram(
    "codelab_llm_ttft_seconds",
    "Time from the upstream request to its first streamed output",
    ["purpose"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
TOKENS = Counter("codelab_llm_tokens_total", "Tokens reported by the upstream", ["kind"])
REQUESTS = Counter(
    "codelab_llm_requests_total", "Upstream completions by outcome", ["purpose", "error_code"]
)
PROMPT_TOKENS, COMPLETION_TOKENS = TOKENS.labels("prompt"), TOKENS.labels("completion")


@functools.lru_cache(maxsize=256)
def _child(metric: Any, *labels: str) -> Any:
    """``metric``'s child for ``labels``, looked up once (``labels()`` validates and locks
    on every call)."""
    return metric.labels(*labels)


class AccountedUpstream:
    """An Upstream whose calls land in the usage store."""

    def __init__(self, upstream: Upstream, store: UsageStore) -> None:
        self.upstream = upstream
        self.store = store

    async def complete(
        self, session_id: str, purpose: str, request: CompletionRequest
    ) -> AsyncIterator[ModelOutput]:
        started, began = time.perf_counter(), dt.datetime.now(dt.UTC)
        finished: ModelFinished | None = None
        error_code: str | None = "CANCELLED"
        waiting_first = True
        try:
            async for chunk in self.upstream.complete(request):
                if isinstance(chunk, ModelFinished):
                    finished = chunk
                elif waiting_first:
                    waiting_first = False
                    _child(TTFT, purpose).observe(time.perf_counter() - started)
                yield chunk
            error_code = None
        except ServiceError as error:
            error_code = error.code
            raise
        finally:
            record = RequestRecord(
                session_id=session_id,
                purpose=purpose,
                model=finished.model
                if finished
                else (request.model or self.upstream.default_model),
                duration_ms=(time.perf_counter() - started) * 1000,
                success=error_code is None,
                error_code=error_code,
                prompt_tokens=finished.prompt_tokens if finished else 0,
                completion_tokens=finished.completion_tokens if finished else 0,
                with_tools=bool(request.tools),
                reasoning_tokens=finished.reasoning_tokens if finished else 0,
                started_at=began,
            )
            _child(REQUESTS, purpose, error_code or "").inc()
            PROMPT_TOKENS.inc(record.prompt_tokens)
            COMPLETION_TOKENS.inc(record.completion_tokens)
            # Queued, not awaited: the stream ends without waiting for its accounting, and
            # a caller that hangs up mid-stream still costs tokens.
            self.store.record(record)
