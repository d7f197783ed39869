"""One agent instance (seed 003 section 2.2): a reusable worker and its clean-up contract.

The worker holds one pinned template version, the pool's shared clients (a read-only
mapping: no session can leave anything in them) and a scratch dict for the session it
serves. ``cleanup`` runs the session's reset hooks, empties the scratch state and then
checks that nothing session-specific is left; the pool (instances.py) replaces an
instance whose cleanup fails.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import uuid
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from services.orchestrator.agents.templates import AgentTemplate
from services.orchestrator.errors import CleanupFailed

ResetHook = Callable[[], None]


class InstanceState(StrEnum):
    """An instance's lifecycle state (column ``agent_instances.state``)."""

    IDLE = "IDLE"
    BUSY = "BUSY"
    RESETTING = "RESETTING"
    ERROR = "ERROR"
    STOPPED = "STOPPED"


SCRATCH: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("instance_scratch")
"""The leased instance's per-session scratch state, for code deep in the agent loop
(e.g. tools found with tool_search); wiped when the instance returns to the pool."""


class AgentInstance:
    """A reusable worker: one pinned template version, shared clients, per-session scratch."""

    __slots__ = ("_hooks", "clients", "failures", "instance_id", "last_used_at", "scratch",
                 "session_id", "state", "template")  # fmt: skip

    def __init__(self, template: AgentTemplate, clients: Mapping[str, Any]) -> None:
        self.instance_id = f"inst_{uuid.uuid4().hex[:20]}"
        self.template = template
        self.clients = clients
        """Shared by every instance of the pool (LLM, tool search, hitl...): read-only."""
        self.scratch: dict[str, Any] = {}
        """Session-scoped state of the current lease; empty between sessions."""
        self.session_id: str | None = None
        self.state = InstanceState.IDLE
        self.failures = 0
        self.last_used_at: dt.datetime | None = None
        self._hooks: list[ResetHook] = []

    def on_reset(self, hook: ResetHook) -> None:
        """Run ``hook`` at release (close session-level caches, cursors...)."""
        self._hooks.append(hook)

    def leftovers(self) -> list[str]:
        """What still belongs to a session; empty after a good cleanup."""
        found = [f"scratch[{key!r}]" for key in self.scratch]
        if self.session_id is not None:
            found.append(f"session_id={self.session_id}")
        if self._hooks:
            found.append(f"{len(self._hooks)} reset hook(s)")
        return found

    def cleanup(self) -> None:
        """Forget the session: hooks first (they may need the scratch), then the state."""
        hooks, self._hooks = self._hooks, []
        failures: list[str] = []
        for hook in hooks:
            try:
                hook()
            except Exception as error:  # every hook runs; the instance is replaced below
                failures.append(f"{getattr(hook, '__name__', 'hook')}: {error!r}")
        self.scratch.clear()
        self.session_id = None
        problems = failures + self.leftovers()
        if problems:
            raise CleanupFailed(f"instance {self.instance_id} not clean: {'; '.join(problems)}")
