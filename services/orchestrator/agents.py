"""The agents the runtime can run. The universal agent serves single-agent mode."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Agent:
    """An agent template: what the model is told and what it may do."""

    name: str
    description: str
    system_prompt: str
    temperature: float | None = None
    max_tokens: int | None = None


UNIVERSAL = Agent(
    name="universal",
    description="General-purpose assistant for single-agent mode",
    system_prompt=(
        "You are CodeLab, an AI coding assistant working inside the user's IDE. "
        "Answer precisely and concisely. Tools run in the IDE on the user's workspace."
    ),
)
