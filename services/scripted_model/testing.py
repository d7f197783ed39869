"""Run the scripted model inside the current event loop (tests, llmproxy standalone)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from services.common.asgi import bind_free_port, running_asgi
from services.scripted_model.app import create_app
from services.scripted_model.config import ScriptedModelSettings
from services.scripted_model.scenarios import ScriptedModelState


@dataclass(frozen=True, slots=True)
class ScriptedModelHandle:
    """A running in-process scripted model.

    `base_url` is what an OpenAI client takes (ends in /v1); `root_url` is where
    the `/_scripted/...` control endpoints live; `state` drives it from Python.
    """

    root_url: str
    state: ScriptedModelState
    settings: ScriptedModelSettings

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"


@contextlib.asynccontextmanager
async def running_scripted_model(
    state: ScriptedModelState | None = None, token_delay_ms: int = 0
) -> AsyncIterator[ScriptedModelHandle]:
    """Serve the scripted model on 127.0.0.1 (free port) for the duration of the block."""
    state = state or ScriptedModelState()
    sock = bind_free_port()
    port = int(sock.getsockname()[1])
    settings = ScriptedModelSettings(host="127.0.0.1", port=port, token_delay_ms=token_delay_ms)
    async with running_asgi(create_app(state, settings), sock=sock, name="scripted-model"):
        yield ScriptedModelHandle(f"http://127.0.0.1:{port}", state, settings)
