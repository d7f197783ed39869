"""Keeping a model call within its template's context budget.

Before each call ``ContextKeeper.fit`` sums the stored counts of the prompt's parts;
under the threshold that sum is all it costs. Past it, the older messages are summarised
by the model (the template's ``compaction_prompt``, or the default) into one summary row
that names the messages it covers, the rest stays verbatim, a tool result still too
large is cut in the prompt (never in the history), and ``context_compacted`` tells the
IDE. After each call the upstream's reported prompt tokens calibrate the estimate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.common.model_stream import TextPiece
from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.state import events
from services.orchestrator.state.store import SessionStore, StoredMessage, Summary
from services.orchestrator.turn.context import (
    DEFAULT_COMPACTION_PROMPT,
    KEEP_SHARE,
    MIN_TOOL_RESULT,
    SUMMARY_ROLE,
    Limits,
    chunks_for_summary,
    context_tokens,
    cut_tool_results,
    is_summary,
    split_point,
    system_with_summary,
    transcript,
    without_summary,
)
from services.orchestrator.turn.tokens import (
    MESSAGE_OVERHEAD,
    Calibration,
    fixed_text_tokens,
    message_tokens,
    text_tokens,
)
from services.orchestrator.turn.toolbox import ToolSpec

log = logging.getLogger(__name__)
FORCED_SHARE = 0.5
"""After the upstream refused a prompt as too long, aim for this share of the budget."""
GUESS_SHARE = 0.9
"""A next request is guessed ahead (peers/early.py) only while its prompt stays under this
share of the compaction threshold: the calibration may move before the turn fits it."""


@dataclass(frozen=True)
class Fitted:
    """A prompt that fits: the system text (summary included) and the messages."""

    system: str
    messages: list[StoredMessage]
    estimate: int
    """Uncalibrated estimate of the whole prompt, for calibrating against usage."""

    def prompt(self) -> list[StoredMessage]:
        return [StoredMessage("system", self.system), *self.messages]


class ContextKeeper:
    """Budgets prompts for one orchestrator process (calibration is per model)."""

    def __init__(
        self,
        llm: LlmClient,
        store: SessionStore,
        post: Callable[[str, Any], None],
    ) -> None:
        self.llm = llm
        self.store = store
        self.post = post
        self.calibration = Calibration()

    def observe(self, template: AgentTemplate, fitted: Fitted, reported: int) -> None:
        """The upstream reported ``reported`` prompt tokens for ``fitted``."""
        self.calibration.observe(template.model, fitted.estimate, reported)

    def room(self, template: AgentTemplate, fitted: Fitted) -> int:
        """Estimated tokens ``fitted``'s prompt may grow by and stay within ``GUESS_SHARE``
        of the compaction threshold (negative: past it already)."""
        limits = Limits(template.context_window, template.max_output_tokens)
        ratio = self.calibration.ratio(template.model)
        return int(limits.threshold * GUESS_SHARE / ratio) - fitted.estimate

    async def fit(
        self,
        sid: str,
        audience: str,
        template: AgentTemplate,
        system: str,
        history: Sequence[StoredMessage],
        tools: Sequence[ToolSpec],
        *,
        force: bool = False,
    ) -> Fitted:
        """The prompt for ``history`` within the template's budget; ``force``: the
        upstream refused the last one as too long, so compact whatever the estimate."""
        limits = Limits(template.context_window, template.max_output_tokens)
        ratio = self.calibration.ratio(template.model)
        fixed = fixed_text_tokens(system) + MESSAGE_OVERHEAD + sum(t.prompt_tokens for t in tools)
        reasoning = template.send_reasoning
        total = fixed + context_tokens(history, reasoning)
        if not force and total * ratio <= limits.threshold:
            return Fitted(system_with_summary(system, history), without_summary(history), total)
        # In estimate units: the calibrated budget divided back by the model's ratio.
        share = FORCED_SHARE if force else 1.0
        budget = int(min(limits.threshold, limits.prompt * share) / ratio) - fixed
        kept = list(history)
        covered = 0
        split = split_point(kept, int(budget * KEEP_SHARE), reasoning)
        if split > 0 and not all(is_summary(m) for m in kept[:split]):
            summary = await self._summarise(sid, template, kept[:split], limits, ratio)
            await self.store.add_summary(sid, summary)
            covered = summary.messages
            row = StoredMessage(
                SUMMARY_ROLE,
                summary.content,
                tokens=summary.tokens,
                covers_from=summary.covers_from,
                covered=summary.messages,
            )
            kept = [row, *kept[split:]]
        size = context_tokens(kept, reasoning)
        if size > budget:
            kept, saved = cut_tool_results(kept, size - budget)
            size -= saved
        after = fixed + size
        if covered:
            event = events.context_compacted(covered, round(total * ratio), round(after * ratio))
            self.post(audience, event)
            log.info(
                "context compacted",
                extra={"fields": {"session_id": sid, "messages": covered, "before": total}},
            )
        return Fitted(system_with_summary(system, kept), without_summary(kept), after)

    async def _summarise(
        self,
        sid: str,
        template: AgentTemplate,
        older: Sequence[StoredMessage],
        limits: Limits,
        ratio: float,
    ) -> Summary:
        """One summary of ``older`` (an earlier summary first, when there is one), asked
        in as many requests as it takes for each to fit the window."""
        instructions = template.prompt_pack.get("compaction_prompt") or DEFAULT_COMPACTION_PROMPT
        answer_tokens = max(256, min(limits.reserve, limits.prompt // 4))
        room = int(limits.prompt / ratio) - text_tokens(instructions) - 4 * MESSAGE_OVERHEAD
        room -= answer_tokens * 2  # the answer, and the earlier summary fed back in
        cap = max(MIN_TOOL_RESULT, room // 8)
        previous = older[0] if is_summary(older[0]) else None
        messages = [m for m in older if not is_summary(m)]
        summary = previous.content if previous else ""
        for group in chunks_for_summary(messages, room, cap):
            parts = [StoredMessage(SUMMARY_ROLE, summary), *group] if summary else group
            asked = transcript(parts, cap)
            text = await self._ask(sid, template, instructions, asked, answer_tokens)
            summary = text or summary
        first = previous.covers_from if previous and previous.covers_from else messages[0].id
        return Summary(
            covers_from=first,
            covers_to=messages[-1].id,
            messages=(previous.covered if previous else 0) + len(messages),
            content=summary,
            tokens=message_tokens(summary) + text_tokens(SUMMARY_ROLE),
        )

    async def _ask(
        self, sid: str, template: AgentTemplate, instructions: str, text: str, max_tokens: int
    ) -> str:
        parts: list[str] = []
        request = [StoredMessage("system", instructions), StoredMessage("user", text)]
        async for output in self.llm.complete(
            sid,
            request,
            purpose="compaction",
            temperature=0.2,
            max_tokens=max_tokens,
            model=template.model,
        ):
            if isinstance(output, TextPiece):
                parts.append(output.text)
        return "".join(parts).strip()
