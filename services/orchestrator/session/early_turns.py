"""Which user messages send their turn's model request as they arrive (peers/early.py).

A message whose turn starts at once and whose agent is known may: the agent it names, or in
single-agent mode the entry agent, which takes every message whatever it names (a routed
message's agent is the classifier's answer, not known yet). A repeat of a message this
process handled may not (its turn begins nothing, and the request would be paid for
nothing), nor, before the attach, a message whose user's sessions or messages are limited
(the attach checks them, and a refused message must cost no upstream call).
"""

from __future__ import annotations

from collections import OrderedDict

from codelab.v1 import common_pb2 as pb
from services.orchestrator.agents.templates import AgentRegistry
from services.orchestrator.peers.early import remember
from services.orchestrator.peers.llm import LlmClient
from services.orchestrator.session.inputs import history_entry
from services.orchestrator.session.limits import UserLimits

KEPT = 10_000
"""New sessions, and handled client message ids, remembered (the oldest forgotten)."""


class EarlyTurns:
    """Decides for ``Runtime`` when a turn's model request leaves early."""

    def __init__(self, llm: LlmClient, agents: AgentRegistry, limits: UserLimits) -> None:
        self.llm = llm
        self.agents = agents
        self.limits = limits
        self._fresh: OrderedDict[str, str] = OrderedDict()
        """Session -> the system prompt of a session attached here with nothing in its log
        yet: its first turn's request can be told."""
        self._handled: OrderedDict[tuple[str, str], str] = OrderedDict()
        """(session, client message id) of user messages handled here: their repeats."""

    def attached(self, sid: str, last_seq: int, system_prompt: str) -> None:
        """A stream attached to ``sid``, whose log ends at ``last_seq``."""
        if last_seq == 0:
            remember(self._fresh, sid, system_prompt, KEPT)

    def handling(self, sid: str, message: pb.ClientMessage) -> None:
        """``message`` is being handled: a repeat of it sends nothing early."""
        if message.HasField("user_message") and message.HasField("client_message_id"):
            remember(self._handled, (sid, message.client_message_id), "", KEPT)

    def arrived(self, sid: str, message: pb.ClientMessage) -> None:
        """``message`` starts its turn at once."""
        self.send(sid, message, self._fresh.pop(sid, None))

    def before_attach(
        self, sid: str, user_id: str, attach: pb.Attach, message: pb.ClientMessage, served: bool
    ) -> None:
        """The first message of a stream whose attach creates its session (a title), read
        with the attach: its request may leave before the attach's round trip. ``served``:
        the session has a worker here (it is not new)."""
        settings = self.limits.settings
        limited = settings.sessions_open or settings.messages_per_minute
        if attach.title and not served and not limited:
            self.send(sid, message, attach.system_prompt, user_id)

    def send(
        self, sid: str, message: pb.ClientMessage, fresh: str | None, user_id: str | None = None
    ) -> None:
        """Send the model request of ``message``'s turn now when its agent is known, it is
        not a repeat and the request can be told (``fresh``: the session is new, with that
        prompt; ``user_id``: whose budget admits it)."""
        if not message.HasField("user_message"):
            return
        if (sid, message.client_message_id) in self._handled:
            return
        agents, said = self.agents, history_entry(message.user_message)
        agent = message.user_message.agent_type if agents.multi_agent_mode else agents.entry
        if agent and said is not None and agents.has(agent):
            # Owned by the message object the session's worker hands its turn (finished).
            self.llm.send_early(sid, agent, said, fresh, user_id, owner=message)

    def finished(self, sid: str, message: object) -> None:
        """The turn of ``message`` is over: the request sent early for it, if it was not
        taken, is cancelled (a request sent for the next message is left to its turn)."""
        self.llm.drop_early(sid, owner=message)

    def drop(self, sid: str) -> None:
        """No turn of this process will take the session's early request: cancel it."""
        self.llm.drop_early(sid)

    def ended(self, sid: str) -> None:
        """The session's worker ended (its guesses stay for its next message)."""
        self._fresh.pop(sid, None)
        self.drop(sid)
