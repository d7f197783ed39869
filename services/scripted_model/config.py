"""Settings of the scripted model server, read from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8090
DEFAULT_TOKEN_DELAY_MS = 15
DEFAULT_MODEL_NAME = "codelab-scripted"

# Anything slower than a minute per chunk is a typo, not a test scenario.
MAX_TOKEN_DELAY_MS = 60_000


@dataclass(frozen=True, slots=True)
class ScriptedModelSettings:
    """Where the scripted model listens and how it paces streamed output.

    `token_delay_ms` is the pause between streamed chunks when the scenario does
    not set its own; `model_name` is what `/v1/models` advertises.
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token_delay_ms: int = DEFAULT_TOKEN_DELAY_MS
    model_name: str = DEFAULT_MODEL_NAME

    def __post_init__(self) -> None:
        if not self.host.strip():
            raise ValueError("scripted model host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"scripted model port must be in 0..65535, got {self.port}")
        if not 0 <= self.token_delay_ms <= MAX_TOKEN_DELAY_MS:
            raise ValueError(
                f"token_delay_ms must be in 0..{MAX_TOKEN_DELAY_MS}, got {self.token_delay_ms}"
            )
        if not self.model_name.strip():
            raise ValueError("model name must not be empty")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ScriptedModelSettings:
        """Build settings from environment variables, falling back to the defaults.

        Raises ValueError naming the offending variable when a value is malformed.
        """
        return cls(
            host=env.get("SCRIPTED_MODEL_HOST", DEFAULT_HOST).strip() or DEFAULT_HOST,
            port=_int_var(env, "SCRIPTED_MODEL_PORT", DEFAULT_PORT, 0, 65535),
            token_delay_ms=_int_var(
                env, "SCRIPTED_MODEL_TOKEN_DELAY_MS", DEFAULT_TOKEN_DELAY_MS, 0, MAX_TOKEN_DELAY_MS
            ),
            model_name=env.get("LLM_MODEL", DEFAULT_MODEL_NAME).strip() or DEFAULT_MODEL_NAME,
        )


def _int_var(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")
    return value
