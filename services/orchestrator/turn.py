"""One turn of an agent: history -> model -> streamed answer -> committed history."""

from __future__ import annotations

import asyncio
import logging
import uuid

from services.common.errors import ServiceError
from services.orchestrator import events
from services.orchestrator.agents import Agent
from services.orchestrator.hub import SessionHub
from services.orchestrator.llm import LlmClient, TextPiece
from services.orchestrator.store import SessionRow, SessionStore, StoredMessage

log = logging.getLogger(__name__)


def prompt_for(
    agent: Agent, session: SessionRow, history: list[StoredMessage]
) -> list[StoredMessage]:
    """System prompt (template + session's own) followed by the conversation."""
    system = agent.system_prompt
    if session.system_prompt:
        system += "\n\n" + session.system_prompt
    return [StoredMessage(role="system", content=system), *history]


class TurnRunner:
    """Runs a user's turn for the session's agent and streams its events."""

    def __init__(self, store: SessionStore, hub: SessionHub, llm: LlmClient) -> None:
        self.store = store
        self.hub = hub
        self.llm = llm

    async def user_turn(self, session: SessionRow, agent: Agent, content: str) -> None:
        sid = session.session_id
        await self.store.add_message(sid, StoredMessage(role="user", content=content))
        history = await self.store.history(sid)
        message_id = f"msg_{uuid.uuid4().hex[:16]}"
        parts: list[str] = []
        try:
            async for output in self.llm.complete(
                sid,
                prompt_for(agent, session, history),
                temperature=agent.temperature,
                max_tokens=agent.max_tokens,
            ):
                if isinstance(output, TextPiece) and output.text:
                    parts.append(output.text)
                    await self.hub.emit(
                        sid, events.assistant_token(output.text, agent.name, message_id)
                    )
        except asyncio.CancelledError:
            if parts:
                # Cancelled mid-answer: keep what the user saw, even while being cancelled.
                await asyncio.shield(
                    self.store.add_message(
                        sid,
                        StoredMessage(role="assistant", content="".join(parts), name=agent.name),
                    )
                )
            raise
        except ServiceError as failure:
            log.warning("turn failed", extra={"fields": {"code": failure.code}})
            if parts:
                # What the user already saw stays in the history, so the model sees it too.
                await self.store.add_message(
                    sid, StoredMessage(role="assistant", content="".join(parts), name=agent.name)
                )
            await self.hub.emit(sid, events.error(failure.code, failure.message, failure.details))
            await self.hub.emit(sid, events.done("error"))
            return
        await self.store.add_message(
            sid, StoredMessage(role="assistant", content="".join(parts), name=agent.name)
        )
        await self.hub.emit(sid, events.assistant_final(agent.name, message_id))
        await self.hub.emit(sid, events.done("completed"))
