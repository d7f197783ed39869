"""How a session looks in the terminal (``rich``), or as JSON lines for scripts.

``RichView`` streams the answer as Markdown, names the agent in charge and every switch,
shows a spinner while a tool runs, the plan as a checklist that ticks as steps finish,
and the agent chain. ``JsonView`` prints each event as one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

Event = dict[str, Any]
STEP_MARKS = {"pending": "[ ]", "running": "[~]", "done": "[x]", "error": "[!]", "blocked": "[-]"}
CHAIN_MARKS = {"pending": "·", "running": "●", "done": "✓", "error": "✗"}


class View(Protocol):
    """What the turn driver shows."""

    def event(self, event: Event) -> None:
        """One runtime event, as it arrives."""

    def tool_running(self, call: Event) -> contextlib.AbstractContextManager[None]:
        """While a tool runs (a spinner in the terminal)."""

    def tool_finished(self, call: Event, result: Any, error: str | None) -> None:
        """A tool's outcome, as sent back to the runtime."""

    def note(self, text: str) -> None:
        """A line from codelab itself (not the runtime)."""


def summary(value: Any, limit: int = 80) -> str:
    """One line of a tool's arguments or result."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RichView:
    """The terminal face."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False)
        self.agent = "orchestrator"
        self._answer = ""
        self._live: Live | None = None

    def print(self, *parts: Any, style: str | None = None) -> None:
        """Print without reading ``[...]`` as markup: runtime text is never markup."""
        self.console.print(*parts, style=style, markup=False)

    def event(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "assistant_message" and event.get("token") is not None:
            self._stream(str(event["token"]))
            return
        self._end_answer()
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(event)

    def _stream(self, token: str) -> None:
        self._answer += token
        if self._live is None:
            self._live = Live(
                Markdown(self._answer), console=self.console, auto_refresh=False, transient=False
            )
            self._live.start()
        self._live.update(Markdown(self._answer), refresh=True)

    def _end_answer(self) -> None:
        if self._live is not None:
            self._live.update(Markdown(self._answer), refresh=True)
            self._live.stop()
            self._live = None
        self._answer = ""

    def _on_assistant_message(self, event: Event) -> None:
        if event.get("content"):
            self.print(Markdown(str(event["content"])))

    def _on_agent_switched(self, event: Event) -> None:
        self.agent = str(event.get("to_agent") or self.agent)
        reason = f" ({event['reason']})" if event.get("reason") else ""
        self.print(
            Text.assemble(
                ("⇄ ", "magenta"),
                (f"{event.get('from_agent')} → ", "dim"),
                (self.agent, "bold magenta"),
                (reason, "dim"),
            )
        )

    def _on_tool_call(self, event: Event) -> None:
        flag = " needs approval" if event.get("requires_approval") else ""
        self.print(
            Text.assemble(
                ("⚙ ", "cyan"),
                (str(event.get("tool_name")), "bold cyan"),
                (f" {summary(event.get('arguments') or {})}", "dim"),
                (flag, "yellow"),
            )
        )

    def _on_plan_approval_required(self, event: Event) -> None:
        plan = event.get("plan_summary") or {}
        body = f"{plan.get('goal', '')}\n{plan.get('subtasks_count', 0)} steps"
        if plan.get("total_estimated_time"):
            body += f", about {plan['total_estimated_time']}"
        self.print(Panel(body, title="plan proposed", border_style="yellow"))

    def _on_plan_update(self, event: Event) -> None:
        lines = [
            f"{STEP_MARKS.get(str(step.get('status')), '[?]')} {step.get('id')}. "
            f"{step.get('desc')}  ({step.get('agent', '-')})"
            for step in event.get("steps") or ()
        ]
        self.print(Panel("\n".join(lines), title="plan", border_style="blue"))

    def _on_plan_progress(self, event: Event) -> None:
        mark = STEP_MARKS.get(str(event.get("status")), "[?]")
        self.print(f"{mark} step {event.get('step_id')}: {summary(event.get('result'))}")

    def _on_plan_rejected(self, event: Event) -> None:
        self.print(f"plan rejected: {event.get('feedback') or ''}", style="yellow")

    def _on_agent_chain_update(self, event: Event) -> None:
        links = [
            f"{CHAIN_MARKS.get(str(a.get('status')), '?')} {a.get('agent_id')}"
            for a in event.get("agents") or ()
        ]
        self.print("chain: " + " → ".join(links), style="blue")

    def _on_error(self, event: Event) -> None:
        self.print(f"error {event.get('error_code')}: {event.get('content')}", style="red")

    def _on_done(self, event: Event) -> None:
        status = event.get("status")
        if status in ("cancelled", "error"):
            self.print(f"turn {status}", style="yellow")

    @contextlib.contextmanager
    def tool_running(self, call: Event) -> Iterator[None]:
        with self.console.status(f"running {call.get('tool_name')}…"):
            yield

    def tool_finished(self, call: Event, result: Any, error: str | None) -> None:
        if error is not None:
            self.print(f"  ✗ {call.get('tool_name')}: {error}", style="red")
        else:
            self.print(f"  ✓ {summary(result)}", style="green")

    def note(self, text: str) -> None:
        self._end_answer()
        self.print(text, style="dim")

    def diff(self, text: str) -> None:
        """A coloured unified diff (or a command) for an approval."""
        self.print(Syntax(text, "diff", theme="ansi_dark", word_wrap=True))


class JsonView:
    """``codelab -p --json``: every event as one JSON line on stdout."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def event(self, event: Event) -> None:
        self.out.write(json.dumps(event, ensure_ascii=False) + "\n")
        self.out.flush()

    @contextlib.contextmanager
    def tool_running(self, call: Event) -> Iterator[None]:
        yield

    def tool_finished(self, call: Event, result: Any, error: str | None) -> None:
        return None

    def note(self, text: str) -> None:
        sys.stderr.write(text + "\n")
