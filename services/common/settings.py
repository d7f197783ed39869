"""Configuration, built once from an injected mapping (normally ``os.environ``).

Names are the contract of the architecture doc; every default is the one
``make run`` uses. Domain code receives a ``Settings`` and never reads the env.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names the variable."""


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be true or false, got {raw!r}")


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name} must be >= {minimum}, got {raw!r}")
    return value


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    value = _number(env, name, default)
    if value != int(value) or value > 65535:
        raise SettingsError(f"{name} must be a port number, got {env.get(name)!r}")
    return int(value)


def _address(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name) or default
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SettingsError(f"{name} must look like host:port, got {value!r}")
    return value


def parse_api_keys(raw: str) -> dict[str, str]:
    """``key:user,key2:user2`` -> {key: user}."""
    keys: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, user = item.partition(":")
        if not sep or not key or not user:
            raise SettingsError(f"GATEWAY_API_KEYS entries must be key:user, got {item!r}")
        keys[key] = user
    return keys


@dataclass(frozen=True)
class Settings:
    """Every knob of the mesh. Field docs name the environment variable."""

    database_url: str | None = None
    """DATABASE_URL; None starts the embedded Postgres under ``data_dir``."""
    data_dir: Path = Path(".data")
    """CODELAB_DATA_DIR: where the embedded Postgres keeps its files."""
    internal_api_key: str = ""
    """INTERNAL_API_KEY: metadata ``x-internal-auth`` every internal call carries."""
    openai_base_url: str | None = None
    """OPENAI_BASE_URL; None means the built-in scripted model."""
    openai_api_key: str = "scripted"
    """OPENAI_API_KEY."""
    llm_model: str = "codelab-scripted"
    """LLM_MODEL: the default upstream model."""
    scripted_token_delay_ms: int = 15
    """SCRIPTED_MODEL_TOKEN_DELAY_MS: pace of the built-in model run in-process by llmproxy."""
    embedding_model: str = "codelab-embed"
    """EMBEDDING_MODEL: the upstream embeddings model."""
    llm_timeout: float = 120.0
    """LLM_TIMEOUT: seconds for one upstream call."""
    llm_max_retries: int = 2
    """LLM_MAX_RETRIES: retries before the first token on 408/409/429/5xx."""
    llm_turn_retries: int = 3
    """LLM_TURN_RETRIES: the orchestrator's retries (with back-off) of a model call that
    failed before its first token, on top of llmproxy's own."""
    gateway_host: str = "127.0.0.1"
    """GATEWAY_HOST."""
    gateway_port: int = 8000
    """GATEWAY_PORT."""
    gateway_api_keys: Mapping[str, str] = field(default_factory=dict)
    """GATEWAY_API_KEYS: ``key:user`` pairs; empty means no client auth (loopback only)."""
    orchestrator_addr: str = "127.0.0.1:50051"
    """ORCHESTRATOR_ADDR (comma-separated for several replicas)."""
    toolsearch_addr: str = "127.0.0.1:50052"
    """TOOLSEARCH_ADDR."""
    hitl_addr: str = "127.0.0.1:50053"
    """HITL_ADDR."""
    llmproxy_addr: str = "127.0.0.1:50054"
    """LLMPROXY_ADDR."""
    hitl_timeout: float = 300.0
    """HITL_TIMEOUT: seconds a pending approval waits before it expires."""
    tool_timeout: float = 0.0
    """TOOL_TIMEOUT: seconds a dispatched tool call waits for its result before it is
    closed with TOOL_TIMEOUT; 0 (unset): each tool's own from the catalog."""
    session_retention_days: float = 30.0
    """SESSION_RETENTION_DAYS: soft-deleted sessions are purged after this many days."""
    multi_agent_mode: bool = True
    """MULTI_AGENT_MODE."""
    agent_stream_timeout: float = 300.0
    """AGENT_STREAM_TIMEOUT: seconds the gateway waits on a silent stream."""
    sse_heartbeat: float = 15.0
    """SSE_HEARTBEAT_SECONDS: idle interval after which the SSE stream sends a ``:`` comment."""
    metrics_port_offset: int = 1000
    """METRICS_PORT_OFFSET: a gRPC service on :P serves Prometheus on :P+offset; 0 disables."""
    log_level: str = "INFO"
    """LOG_LEVEL."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Build and validate; raise SettingsError naming the bad variable."""
        orchestrators = env.get("ORCHESTRATOR_ADDR") or cls.orchestrator_addr
        for i, addr in enumerate(orchestrators.split(",")):
            _address({"ORCHESTRATOR_ADDR": addr.strip()}, "ORCHESTRATOR_ADDR", "")
            if i > 32:
                raise SettingsError("ORCHESTRATOR_ADDR lists too many replicas")
        level = (env.get("LOG_LEVEL") or cls.log_level).upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise SettingsError(f"LOG_LEVEL must be DEBUG/INFO/WARNING/ERROR, got {level!r}")
        return cls(
            database_url=env.get("DATABASE_URL") or None,
            data_dir=Path(env.get("CODELAB_DATA_DIR") or cls.data_dir),
            internal_api_key=env.get("INTERNAL_API_KEY", ""),
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            openai_api_key=env.get("OPENAI_API_KEY") or cls.openai_api_key,
            llm_model=env.get("LLM_MODEL") or cls.llm_model,
            embedding_model=env.get("EMBEDDING_MODEL") or cls.embedding_model,
            scripted_token_delay_ms=int(
                _number(env, "SCRIPTED_MODEL_TOKEN_DELAY_MS", cls.scripted_token_delay_ms)
            ),
            llm_timeout=_number(env, "LLM_TIMEOUT", cls.llm_timeout, minimum=0.01),
            llm_max_retries=int(_number(env, "LLM_MAX_RETRIES", cls.llm_max_retries)),
            llm_turn_retries=int(_number(env, "LLM_TURN_RETRIES", cls.llm_turn_retries)),
            gateway_host=env.get("GATEWAY_HOST") or cls.gateway_host,
            gateway_port=_port(env, "GATEWAY_PORT", cls.gateway_port),
            gateway_api_keys=parse_api_keys(env.get("GATEWAY_API_KEYS", "")),
            orchestrator_addr=orchestrators,
            toolsearch_addr=_address(env, "TOOLSEARCH_ADDR", cls.toolsearch_addr),
            hitl_addr=_address(env, "HITL_ADDR", cls.hitl_addr),
            llmproxy_addr=_address(env, "LLMPROXY_ADDR", cls.llmproxy_addr),
            hitl_timeout=_number(env, "HITL_TIMEOUT", cls.hitl_timeout, minimum=0.1),
            tool_timeout=_number(env, "TOOL_TIMEOUT", cls.tool_timeout),
            session_retention_days=_number(
                env, "SESSION_RETENTION_DAYS", cls.session_retention_days, minimum=0
            ),
            multi_agent_mode=_bool(env, "MULTI_AGENT_MODE", cls.multi_agent_mode),
            agent_stream_timeout=_number(
                env, "AGENT_STREAM_TIMEOUT", cls.agent_stream_timeout, minimum=1
            ),
            sse_heartbeat=_number(env, "SSE_HEARTBEAT_SECONDS", cls.sse_heartbeat, minimum=0.05),
            metrics_port_offset=_port(env, "METRICS_PORT_OFFSET", cls.metrics_port_offset),
            log_level=level,
        )

    def require_internal_key(self) -> str:
        """The key a service must have to serve; refuse to start without one."""
        if not self.internal_api_key:
            raise SettingsError("INTERNAL_API_KEY must be set (make run generates one)")
        return self.internal_api_key
