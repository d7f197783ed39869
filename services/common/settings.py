"""Configuration, built once from an injected mapping (normally ``os.environ``).

Names are the contract of the architecture doc; every default is the one
``make run`` uses. Domain code receives a ``Settings`` and never reads the env.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.common.env_values import number
from services.common.errors import SettingsError
from services.common.limit_settings import LimitSettings

TOOL_SECRET = "TOOL_SECRET_"


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
    return number(env, name, default, minimum=minimum, error=SettingsError)


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    value = _number(env, name, default, minimum=1)
    if value != int(value):
        raise SettingsError(f"{name} must be a whole number, got {env.get(name)!r}")
    return int(value)


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


_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:.]+|[A-Za-z0-9]([A-Za-z0-9.-]{0,252}))$")


def _host(env: Mapping[str, str], name: str, default: str) -> str:
    value = (env.get(name) or default).strip()
    if not _HOST.match(value):
        raise SettingsError(f"{name} must be a host name or IP address, got {value!r}")
    return value.strip("[]")  # [::1] and ::1 both name the IPv6 loopback


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    return Path(raw) if raw else None


def _tls_pair(env: Mapping[str, str], cert: str, key: str, prefix: str) -> dict[str, Path | None]:
    """A certificate and its key come together or not at all."""
    cert_path, key_path = _path(env, cert), _path(env, key)
    if (cert_path is None) != (key_path is None):
        raise SettingsError(f"{cert} and {key} must be set together")
    return {f"{prefix}_cert": cert_path, f"{prefix}_key": key_path}


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
    llm_stream_pieces_per_s: float = 1000.0
    """LLM_STREAM_PIECES_PER_S: text pieces per second one llmproxy's streams share; past
    it a stream's text is joined into fewer pieces (llmproxy/pacing.py); 0: no limit."""
    llm_early_requests: bool = True
    """LLM_EARLY_REQUESTS: send a turn's model request as its user message arrives, when the
    request can be told beforehand (peers/early.py); a wrong guess costs an upstream call."""
    llm_turn_retries: int = 3
    """LLM_TURN_RETRIES: the orchestrator's retries (with back-off) of a model call that
    failed before its first token, on top of llmproxy's own."""
    gateway_host: str = "127.0.0.1"
    """GATEWAY_HOST."""
    gateway_port: int = 8000
    """GATEWAY_PORT."""
    gateway_api_keys: Mapping[str, str] = field(default_factory=dict)
    """GATEWAY_API_KEYS: ``key:user`` pairs seeding the key table; empty means no client
    auth (loopback only)."""
    tool_secrets: Mapping[str, str] = field(default_factory=dict)
    """TOOL_SECRET_<NAME>: the values a tool source may name as ``${NAME}`` in its env or
    headers (only these: a registered source cannot read the runtime's own keys)."""
    gateway_key_cache_seconds: float = 10.0
    """GATEWAY_KEY_CACHE_SECONDS: how long the gateway trusts a key check (a revoked key
    stops working within this time)."""
    gateway_cors_origins: tuple[str, ...] = ()
    """GATEWAY_CORS_ORIGINS: browser origins allowed to call the gateway (comma-separated)."""
    limits: LimitSettings = field(default_factory=LimitSettings)
    """LIMIT_* and LLM_PRICES: per-key limits (see limit_settings.py)."""
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
    agent_instances_max: int = 2048
    """AGENT_INSTANCES_MAX: instances per agent template in one orchestrator: at most this
    many of an agent's messages are handled at once; more wait for one to be released."""
    agent_stream_timeout: float = 300.0
    """AGENT_STREAM_TIMEOUT: seconds the gateway waits on a silent stream."""
    sse_heartbeat: float = 15.0
    """SSE_HEARTBEAT_SECONDS: idle interval after which the SSE stream sends a ``:`` comment."""
    metrics_port_offset: int = 1000
    """METRICS_PORT_OFFSET: a gRPC service on :P serves Prometheus on :P+offset; 0 disables."""
    metrics_host: str = "127.0.0.1"
    """METRICS_HOST: the address the Prometheus endpoint binds (loopback unless opened up)."""
    log_level: str = "INFO"
    """LOG_LEVEL."""
    grpc_tls_cert: Path | None = None
    """GRPC_TLS_CERT: PEM certificate this process presents; with GRPC_TLS_KEY turns TLS on."""
    grpc_tls_key: Path | None = None
    """GRPC_TLS_KEY: PEM private key of GRPC_TLS_CERT."""
    grpc_tls_ca: Path | None = None
    """GRPC_TLS_CA: PEM bundle peers must chain to; set: mutual TLS (clients show their cert)."""
    grpc_health_port: int = 0
    """GRPC_HEALTH_PORT: a plaintext port serving only grpc.health.v1 (kubelet probes speak
    no TLS); 0: health on the service port only."""
    gateway_tls_cert: Path | None = None
    """GATEWAY_TLS_CERT: PEM certificate of the gateway's HTTPS/WSS listener."""
    gateway_tls_key: Path | None = None
    """GATEWAY_TLS_KEY: its private key."""
    otel_endpoint: str | None = None
    """OTEL_EXPORTER_OTLP_ENDPOINT: OTLP/gRPC collector; set: traces are exported, else off."""

    @property
    def grpc_tls(self) -> bool:
        """True when the mesh's gRPC links use TLS."""
        return self.grpc_tls_cert is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Build and validate; raise SettingsError naming the bad variable."""
        orchestrators = env.get("ORCHESTRATOR_ADDR") or cls.orchestrator_addr
        for i, addr in enumerate(orchestrators.split(",")):
            _address({"ORCHESTRATOR_ADDR": addr.strip()}, "ORCHESTRATOR_ADDR", "")
            if i > 32:
                raise SettingsError("ORCHESTRATOR_ADDR lists too many replicas")
        if env.get("GRPC_TLS_CA") and not env.get("GRPC_TLS_CERT"):
            raise SettingsError("GRPC_TLS_CA needs GRPC_TLS_CERT and GRPC_TLS_KEY (mutual TLS)")
        level = (env.get("LOG_LEVEL") or cls.log_level).upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise SettingsError(f"LOG_LEVEL must be DEBUG/INFO/WARNING/ERROR, got {level!r}")
        limits = LimitSettings.from_env(env)
        origins = tuple(
            o.strip().rstrip("/") for o in env.get("GATEWAY_CORS_ORIGINS", "").split(",")
        )
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
            llm_stream_pieces_per_s=_number(
                env, "LLM_STREAM_PIECES_PER_S", cls.llm_stream_pieces_per_s
            ),
            llm_early_requests=_bool(env, "LLM_EARLY_REQUESTS", cls.llm_early_requests),
            llm_turn_retries=int(_number(env, "LLM_TURN_RETRIES", cls.llm_turn_retries)),
            gateway_host=env.get("GATEWAY_HOST") or cls.gateway_host,
            gateway_port=_port(env, "GATEWAY_PORT", cls.gateway_port),
            gateway_api_keys=parse_api_keys(env.get("GATEWAY_API_KEYS", "")),
            tool_secrets={
                k.removeprefix(TOOL_SECRET): v
                for k, v in env.items()
                if k.startswith(TOOL_SECRET) and k != TOOL_SECRET
            },
            gateway_key_cache_seconds=_number(
                env, "GATEWAY_KEY_CACHE_SECONDS", cls.gateway_key_cache_seconds
            ),
            gateway_cors_origins=tuple(o for o in origins if o),
            limits=limits,
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
            agent_instances_max=_count(env, "AGENT_INSTANCES_MAX", cls.agent_instances_max),
            agent_stream_timeout=_number(
                env, "AGENT_STREAM_TIMEOUT", cls.agent_stream_timeout, minimum=1
            ),
            sse_heartbeat=_number(env, "SSE_HEARTBEAT_SECONDS", cls.sse_heartbeat, minimum=0.05),
            metrics_port_offset=_port(env, "METRICS_PORT_OFFSET", cls.metrics_port_offset),
            metrics_host=_host(env, "METRICS_HOST", cls.metrics_host),
            log_level=level,
            **_tls_pair(env, "GRPC_TLS_CERT", "GRPC_TLS_KEY", "grpc_tls"),
            grpc_tls_ca=_path(env, "GRPC_TLS_CA"),
            grpc_health_port=_port(env, "GRPC_HEALTH_PORT", cls.grpc_health_port),
            **_tls_pair(env, "GATEWAY_TLS_CERT", "GATEWAY_TLS_KEY", "gateway_tls"),
            otel_endpoint=env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None,
        )

    def require_internal_key(self) -> str:
        """The key a service must have to serve; refuse to start without one."""
        if not self.internal_api_key:
            raise SettingsError("INTERNAL_API_KEY must be set (make run generates one)")
        return self.internal_api_key
