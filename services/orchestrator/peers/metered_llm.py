"""The model behind the per-key budgets: refused before the upstream call once the day's
tokens or cost are spent; every finished call counted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from services.common.model_stream import ModelFinished, ModelOutput
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.session.limits import UserLimits
from services.orchestrator.state.store import StoredMessage
from services.orchestrator.turn.toolbox import ToolSpec


class MeteredLlm(LlmClient):
    """An LlmClient whose calls go through ``limits``."""

    def __init__(self, inner: LlmClient, limits: UserLimits) -> None:
        super().__init__(inner.stub, inner.deadline, inner.turn_retries)
        self.limits = limits

    async def complete(
        self,
        session_id: str,
        messages: Sequence[StoredMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        purpose: str = "turn",
        temperature: float | None = None,
        max_tokens: int | None = None,
        model: str = "",
        with_reasoning: bool = False,
        upstream_seconds: float | None = None,
    ) -> AsyncIterator[ModelOutput]:
        await self.limits.admit_model_call(session_id)
        async for output in super().complete(
            session_id,
            messages,
            tools=tools,
            purpose=purpose,
            temperature=temperature,
            max_tokens=max_tokens,
            model=model,
            with_reasoning=with_reasoning,
            upstream_seconds=upstream_seconds,
        ):
            if isinstance(output, ModelFinished):
                await self.limits.record(
                    session_id,
                    output.model or model,
                    output.prompt_tokens,
                    output.completion_tokens,
                )
            yield output
