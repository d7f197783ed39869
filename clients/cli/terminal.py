"""The person at a real terminal: ``prompt_toolkit`` asks, ``rich`` shows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from prompt_toolkit import PromptSession

from clients.cli import patches
from clients.cli.errors import CliError, Interrupted
from clients.cli.person import CallDecision, Event, PatchReview, PlanDecision
from clients.cli.preview import edit_arguments, edit_text, preview
from clients.cli.view import STEP_MARKS, RichView
from clients.cli.workspace import Workspace

T = TypeVar("T")


class TerminalPerson:
    """Asks with one key per choice; ``edit`` opens ``$EDITOR`` on the arguments.

    prompt_toolkit reads Ctrl-C (and Ctrl-D) at a question as a key; either raises
    Interrupted, which cancels the turn like Ctrl-C anywhere else.
    """

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

    async def ask(self, message: str) -> str:
        """One line from the person; Interrupted on Ctrl-C or Ctrl-D."""
        try:
            return await self.prompts.prompt_async(message)
        except (KeyboardInterrupt, EOFError) as stopped:
            raise Interrupted(message) from stopped

    async def choose(self, question: str, choices: Sequence[str]) -> str:
        """One of ``choices``, by its first letter or in full."""
        keys = {choice[0]: choice for choice in choices}
        hint = " / ".join(f"[{c[0]}]{c[1:]}" for c in choices)
        while True:
            raw = (await self.ask(f"{question} {hint} › ")).strip().lower()
            picked = keys.get(raw[:1]) if raw else None
            if picked is not None and (len(raw) == 1 or picked.startswith(raw)):
                return picked
            self.view.note(f"answer one of: {', '.join(choices)}")

    async def review_call(self, call: Event, shown: str) -> CallDecision:
        async def edit() -> dict[str, Any]:
            return await edit_arguments(call, self.editor)

        choice, feedback, edited = await self._review(
            f"approval needed: {call.get('tool_name')} ({call.get('reason') or 'policy'})",
            shown,
            ("allow?", ("approve", "edit", "reject"), "send the edited call?"),
            edit,
            lambda arguments: preview(self.workspace, {**call, "arguments": arguments}),
        )
        return CallDecision(choice, arguments=edited, feedback=feedback)  # type: ignore[arg-type]

    async def review_patch(self, patch: str, description: str | None) -> PatchReview:
        async def edit() -> str:
            edited = await edit_text(patch, ".diff", self.editor)
            patches.plan(self.workspace, edited)  # an edit must still apply
            return edited

        choice, feedback, edited = await self._review(
            f"patch review: {description or 'proposed change'} (nothing is written yet)",
            patch,
            ("keep this patch?", ("keep", "edit", "reject"), "keep the edited patch?"),
            edit,
            str,  # the edited patch is its own diff
        )
        return PatchReview(choice, patch=edited, feedback=feedback)  # type: ignore[arg-type]

    async def _review(
        self,
        header: str,
        shown: str,
        questions: tuple[str, tuple[str, str, str], str],
        edit: Callable[[], Awaitable[T]],
        show_edited: Callable[[T], str],
    ) -> tuple[str, str | None, T | None]:
        """Show ``shown`` and ask: (the choice, feedback for a reject, what an edit made).
        ``questions``: the question, its three choices (accept, edit, reject) and the
        question that confirms an edit; a failed edit is noted and asked again."""
        question, choices, confirm = questions
        self.view.print(header, style="yellow")
        self.view.diff(shown)
        while True:
            choice = await self.choose(question, choices)
            if choice == choices[0]:
                return choice, None, None
            if choice == choices[2]:
                return choice, await self.feedback("why"), None
            try:
                edited = await edit()
            except CliError as failure:
                self.view.note(f"edit failed: {failure.message}")
                continue
            self.view.diff(show_edited(edited))
            if await self.choose(confirm, ("yes", "no")) == "yes":
                return choice, None, edited

    async def review_plan(self, request: Event, steps: list[Event]) -> PlanDecision:
        for step in steps:
            mark = STEP_MARKS.get(str(step.get("status")), "[ ]")
            self.view.print(f"  {mark} {step.get('desc')} ({step.get('agent', '-')})")
        choice = await self.choose("run this plan?", ("approve", "modify", "reject"))
        if choice == "approve":
            return PlanDecision("approve")
        feedback = await self.feedback("what should change" if choice == "modify" else "why")
        return PlanDecision(choice, feedback=feedback)  # type: ignore[arg-type]

    async def feedback(self, question: str) -> str | None:
        """Free text for the model (None when the person typed nothing)."""
        return (await self.ask(f"{question} (the model reads this) › ")).strip() or None

    async def answer(self, question: str, options: list[str]) -> str:
        self.view.print(question, style="bold")
        for number, option in enumerate(options, 1):
            self.view.print(f"  {number}. {option}")
        raw = (await self.ask("answer › ")).strip()
        if raw.isdigit() and 1 <= int(raw) <= len(options):
            return options[int(raw) - 1]
        return raw
