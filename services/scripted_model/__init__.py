"""Built-in scripted model: an OpenAI-compatible HTTP server standing in for a real LLM.

Tests queue `Scenario`s (over `/_scripted/scenarios` or `ScriptedModelState.enqueue`)
to script each completion; without one it answers with plausible defaults.
"""

from services.scripted_model.app import create_app, serve
from services.scripted_model.config import ScriptedModelSettings
from services.scripted_model.errors import ScenarioError
from services.scripted_model.scenarios import ErrorSpec, Scenario, ScriptedModelState, ToolCallSpec
from services.scripted_model.testing import ScriptedModelHandle, running_scripted_model

__all__ = [
    "ErrorSpec",
    "Scenario",
    "ScenarioError",
    "ScriptedModelHandle",
    "ScriptedModelSettings",
    "ScriptedModelState",
    "ToolCallSpec",
    "create_app",
    "running_scripted_model",
    "serve",
]
