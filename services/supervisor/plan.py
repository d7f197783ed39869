"""What the supervisor starts: children, their environment and readiness targets.

Pure: everything is derived from an injected env mapping (normally ``os.environ``)
plus the DSN of an embedded Postgres the caller may have started. No process is
started and no socket is opened here; probes are only *built*.

Supervisor-only knobs (children never read them):

- ``SUPERVISOR_GRACE`` (default 10): seconds each child gets after SIGTERM before SIGKILL.
- ``SUPERVISOR_READY_TIMEOUT`` (default 90): seconds to wait for every child to answer.
- ``SUPERVISOR_BACKOFF_MAX`` (default 30): the cap, in seconds, of a crashing child's
  exponential restart back-off (restarts never stop).
- ``SCRIPTED_MODEL_PORT`` (default 8090): port of the built-in scripted model.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from services.common.env_values import number
from services.common.errors import SettingsError
from services.common.settings import Settings
from services.common.tls import MeshTls
from services.supervisor.readiness import Probe, dial_host, grpc_serving, http_ok

SCRIPTED_MODEL = "scripted_model"
GRPC_SERVICES = ("toolsearch", "hitl", "llmproxy", "orchestrator")
CHILD_NAMES = (SCRIPTED_MODEL, *GRPC_SERVICES, "gateway")
"""Every child, in start order (stopped in reverse)."""


@dataclass(frozen=True)
class ChildSpec:
    """One child process: its name, command line, full environment and readiness probe.

    ``ready`` None means "ready as soon as it is started".
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    ready: Probe | None = None


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool = False) -> float:
    return number(env, name, default, integer=integer, error=SettingsError)


@dataclass(frozen=True)
class SupervisorKnobs:
    """The supervisor-only settings (see the module docstring)."""

    grace: float = 10.0
    ready_timeout: float = 90.0
    backoff_max: float = 30.0
    scripted_model_port: int = 8090

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SupervisorKnobs:
        """Parse and validate; raise SettingsError naming the bad variable."""
        port = int(_number(env, "SCRIPTED_MODEL_PORT", cls.scripted_model_port, integer=True))
        if not 0 < port <= 65535:
            raise SettingsError(f"SCRIPTED_MODEL_PORT must be a port number, got {port}")
        return cls(
            grace=_number(env, "SUPERVISOR_GRACE", cls.grace),
            ready_timeout=_number(env, "SUPERVISOR_READY_TIMEOUT", cls.ready_timeout),
            backoff_max=_number(env, "SUPERVISOR_BACKOFF_MAX", cls.backoff_max),
            scripted_model_port=port,
        )


def select_children(only: str | None) -> tuple[str, ...]:
    """``--only a,b`` -> the chosen names in start order; None -> every child."""
    if only is None:
        return CHILD_NAMES
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    unknown = sorted(wanted - set(CHILD_NAMES))
    if unknown or not wanted:
        raise SettingsError(f"--only takes names from {', '.join(CHILD_NAMES)}; got {only!r}")
    return tuple(name for name in CHILD_NAMES if name in wanted)


def needs_embedded_postgres(env: Mapping[str, str], names: Iterable[str]) -> bool:
    """True when DATABASE_URL is unset and some chosen child is a mesh service."""
    return not env.get("DATABASE_URL") and any(name != SCRIPTED_MODEL for name in names)


@dataclass(frozen=True)
class Plan:
    """The children to run plus what the "is up" banner needs to say."""

    children: list[ChildSpec]
    settings: Settings
    knobs: SupervisorKnobs
    model_url: str
    builtin_model: bool
    database: str
    shared_env: Mapping[str, str]


def _new_key() -> str:
    return secrets.token_urlsafe(32)


def build_plan(
    env: Mapping[str, str],
    *,
    embedded_dsn: str | None = None,
    only: Sequence[str] = CHILD_NAMES,
    new_key: Callable[[], str] = _new_key,
) -> Plan:
    """The children to start (in order) with their env and probes; raise SettingsError."""
    settings = Settings.from_env(env)
    knobs = SupervisorKnobs.from_env(env)
    builtin_model = settings.openai_base_url is None
    model_url = settings.openai_base_url or f"http://127.0.0.1:{knobs.scripted_model_port}/v1"
    shared = dict(env)
    # One key per run, the same for everyone: internal calls authenticate with it.
    shared["INTERNAL_API_KEY"] = settings.internal_api_key or new_key()
    shared["OPENAI_BASE_URL"] = model_url
    # Children log JSON lines to the inherited stderr; unbuffered keeps them in order.
    shared.setdefault("PYTHONUNBUFFERED", "1")
    database = "external (DATABASE_URL)" if settings.database_url else "none"
    if settings.database_url is None and embedded_dsn is not None:
        shared["DATABASE_URL"] = embedded_dsn
        database = f"embedded ({settings.data_dir / 'postgres'})"

    def spec(name: str, ready: Probe, **extra_env: str) -> ChildSpec:
        argv = [sys.executable, "-m", f"services.{name}"]
        return ChildSpec(name=name, argv=argv, env={**shared, **extra_env}, ready=ready)

    scheme = "https" if settings.gateway_tls_cert else "http"
    gateway_base = f"{scheme}://{dial_host(settings.gateway_host)}:{settings.gateway_port}"
    tls = MeshTls.from_settings(settings)
    credentials = tls.channel_credentials() if tls is not None else None

    def grpc_probe(address: str) -> Probe:
        return grpc_serving(address, credentials=credentials)

    probes: dict[str, Callable[[], Probe]] = {
        "toolsearch": lambda: grpc_probe(settings.toolsearch_addr),
        "hitl": lambda: grpc_probe(settings.hitl_addr),
        "llmproxy": lambda: grpc_probe(settings.llmproxy_addr),
        "orchestrator": lambda: grpc_probe(settings.orchestrator_addr),
        "gateway": lambda: http_ok(f"{gateway_base}/health"),
    }
    children: list[ChildSpec] = []
    for name in CHILD_NAMES:
        if name not in only:
            continue
        if name == SCRIPTED_MODEL:
            if builtin_model:
                port = str(knobs.scripted_model_port)
                children.append(
                    spec(name, http_ok(f"{model_url}/models"), SCRIPTED_MODEL_PORT=port)
                )
            continue
        children.append(spec(name, probes[name]()))
    return Plan(children, settings, knobs, model_url, builtin_model, database, shared)


def render_banner(plan: Plan) -> str:
    """The short human block printed once every child answers."""
    s = plan.settings
    names = {child.name for child in plan.children}
    lines = ["CodeLab Agent Runtime is up"]
    if "gateway" in names:
        base = f"{dial_host(s.gateway_host)}:{s.gateway_port}"
        secure = "s" if s.gateway_tls_cert else ""
        lines.append(
            f"  gateway      http{secure}://{base}  "
            f"(WebSocket ws{secure}://{base}/ws/{{session_id}}, "
            "docs /docs, health /health, metrics /metrics)"
        )
        lines.append(f"  playground   http://{base}/playground   terminal: codelab (CODELAB_URL)")
    addresses = {
        "orchestrator": f"{s.orchestrator_addr} (gRPC)",
        "toolsearch": s.toolsearch_addr,
        "hitl": s.hitl_addr,
        "llmproxy": s.llmproxy_addr,
    }
    grpc_parts = [f"{name} {addr}" for name, addr in addresses.items() if name in names]
    if grpc_parts:
        lines.append("  " + "  ".join(grpc_parts))
    model = "built-in scripted model" if plan.builtin_model else "OPENAI_BASE_URL"
    lines.append(f"  model        {plan.model_url} ({model})   database  {plan.database}")
    lines.append("Ctrl-C stops everything.")
    return "\n".join(lines) + "\n"
