"""The person at a real terminal: ``prompt_toolkit`` asks, ``rich`` shows."""

from __future__ import annotations

from collections.abc import Sequence

from prompt_toolkit import PromptSession

from clients.cli.errors import CliError
from clients.cli.person import CallDecision, Event, PlanDecision
from clients.cli.preview import edit_arguments, preview
from clients.cli.view import STEP_MARKS, RichView
from clients.cli.workspace import Workspace


class TerminalPerson:
    """Asks with one key per choice; ``edit`` opens ``$EDITOR`` on the arguments."""

    def __init__(
        self,
        view: RichView,
        workspace: Workspace,
        session: PromptSession[str] | None = None,
        editor: list[str] | None = None,
    ) -> None:
        self.view = view
        self.workspace = workspace
        self.prompts: PromptSession[str] = session or PromptSession()
        self.editor = editor

    async def choose(self, question: str, choices: Sequence[str]) -> str:
        """One of ``choices``, by its first letter or in full."""
        keys = {choice[0]: choice for choice in choices}
        hint = " / ".join(f"[{c[0]}]{c[1:]}" for c in choices)
        while True:
            raw = (await self.prompts.prompt_async(f"{question} {hint} › ")).strip().lower()
            picked = keys.get(raw[:1]) if raw else None
            if picked is not None and (len(raw) == 1 or picked.startswith(raw)):
                return picked
            self.view.note(f"answer one of: {', '.join(choices)}")

    async def review_call(self, call: Event, shown: str) -> CallDecision:
        self.view.print(
            f"approval needed: {call.get('tool_name')} ({call.get('reason') or 'policy'})",
            style="yellow",
        )
        self.view.diff(shown)
        while True:
            choice = await self.choose("allow?", ("approve", "edit", "reject"))
            if choice == "approve":
                return CallDecision("approve")
            if choice == "reject":
                feedback = await self.prompts.prompt_async("why (the model reads this) › ")
                return CallDecision("reject", feedback=feedback.strip() or None)
            try:
                edited = await edit_arguments(call, self.editor)
            except CliError as failure:
                self.view.note(f"edit failed: {failure.message}")
                continue
            self.view.diff(preview(self.workspace, {**call, "arguments": edited}))
            if await self.choose("send the edited call?", ("yes", "no")) == "yes":
                return CallDecision("edit", arguments=edited)

    async def review_plan(self, request: Event, steps: list[Event]) -> PlanDecision:
        for step in steps:
            mark = STEP_MARKS.get(str(step.get("status")), "[ ]")
            self.view.print(f"  {mark} {step.get('desc')} ({step.get('agent', '-')})")
        choice = await self.choose("run this plan?", ("approve", "modify", "reject"))
        if choice == "approve":
            return PlanDecision("approve")
        feedback = await self.prompts.prompt_async(
            "what should change › " if choice == "modify" else "why › "
        )
        return PlanDecision(choice, feedback=feedback.strip() or None)  # type: ignore[arg-type]

    async def answer(self, question: str, options: list[str]) -> str:
        self.view.print(question, style="bold")
        for number, option in enumerate(options, 1):
            self.view.print(f"  {number}. {option}")
        raw = (await self.prompts.prompt_async("answer › ")).strip()
        if raw.isdigit() and 1 <= int(raw) <= len(options):
            return options[int(raw) - 1]
        return raw
