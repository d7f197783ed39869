"""The deployment files, checked offline: the kustomize output (rendered by the pinned
kubectl) validates against the Kubernetes 1.37 schemas and wires what the services
expect; compose.yaml is a valid Compose file that starts the same mesh."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from compose_spec import PyCompose

from bench.report import named_numbers, read_table
from services.common.server import LIVENESS
from services.common.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUBERNETES = "1.37.0"
GRPC = {"orchestrator": 50051, "toolsearch": 50052, "hitl": 50053, "llmproxy": 50054}
PROCESSES = {*GRPC, "gateway"}
Doc = dict[str, Any]


def render(folder: Path) -> list[Doc]:
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run(
        [str(kubectl), "kustomize", str(folder)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def of_kind(docs: list[Doc], kind: str) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def documented_variables() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^# ?([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE))


@pytest.fixture(scope="module")
def base() -> list[Doc]:
    return render(K8S / "base")


@pytest.fixture(scope="module")
def scaled() -> list[Doc]:
    return render(K8S / "overlays" / "replicas")


@pytest.mark.parametrize("folder", ["base", "overlays/replicas"])
def test_the_kustomize_output_validates_strictly(folder: str) -> None:
    for doc in render(K8S / folder):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_validation_can_fail(base: list[Doc]) -> None:
    broken = copy.deepcopy(of_kind(base, "Deployment")["hitl"])
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def env_of(container: Doc) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_each_process_has_a_deployment_and_a_service(base: list[Doc]) -> None:
    deployments, services = of_kind(base, "Deployment"), of_kind(base, "Service")
    assert set(deployments) == set(services) == PROCESSES
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", f"services.{name}"]
        assert importlib.util.find_spec(f"services.{name}.__main__") is not None
        assert pod["securityContext"]["runAsNonRoot"] is True
        for each in (*pod.get("initContainers", []), container):
            assert each["resources"]["requests"]["memory"] and each["resources"]["requests"]["cpu"]
            assert each["securityContext"]["allowPrivilegeEscalation"] is False


def test_grpc_services_use_native_probes_on_the_health_port(base: list[Doc]) -> None:
    (config,) = of_kind(base, "ConfigMap").values()
    health_port = int(config["data"]["GRPC_HEALTH_PORT"])
    deployments = of_kind(base, "Deployment")
    for name, port in GRPC.items():
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert container["readinessProbe"]["grpc"] == {"port": health_port}
        assert container["livenessProbe"]["grpc"] == {"port": health_port, "service": LIVENESS}
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"grpc": port, "metrics": port + 1000, "health": health_port}
        annotations = deployments[name]["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(port + 1000)
        env = env_of(container)
        assert env[f"{name.upper()}_ADDR"] == f"0.0.0.0:{port}"
        for secret in ("DATABASE_URL", "INTERNAL_API_KEY"):
            assert env[secret]["secretKeyRef"]["name"] == "codelab-secrets"
        service = of_kind(base, "Service")[name]["spec"]
        assert service["clusterIP"] == "None"  # clients round-robin over every pod
        assert config["data"][f"{name.upper()}_ADDR"] == f"{name}:{port}"


def test_the_migration_job_runs_before_the_services(base: list[Doc]) -> None:
    (job,) = of_kind(base, "Job").values()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "services.migrate"]
    for name in GRPC:
        pod = of_kind(base, "Deployment")[name]["spec"]["template"]["spec"]
        (wait,) = pod["initContainers"]
        assert wait["command"] == ["python", "-m", "services.migrate", "--wait"]


def test_the_gateway_is_exposed_with_long_stream_timeouts(base: list[Doc]) -> None:
    ingress = of_kind(base, "Ingress")["gateway"]["metadata"]["annotations"]
    assert int(ingress["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    (container,) = of_kind(base, "Deployment")["gateway"]["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["GATEWAY_API_KEYS"]["secretKeyRef"]["name"] == "codelab-secrets"


def test_the_replicas_overlay_scales_out_under_disruption_budgets(scaled: list[Doc]) -> None:
    deployments = of_kind(scaled, "Deployment")
    assert deployments["orchestrator"]["spec"]["replicas"] >= 3
    budgets = of_kind(scaled, "PodDisruptionBudget")
    assert set(budgets) == PROCESSES
    for name, budget in budgets.items():
        assert budget["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": name}
        assert deployments[name]["spec"]["replicas"] > budget["spec"]["maxUnavailable"]


def test_every_variable_the_manifests_set_is_documented(base: list[Doc]) -> None:
    documented = documented_variables()
    (config,) = of_kind(base, "ConfigMap").values()
    names = set(config["data"])
    for deployment in of_kind(base, "Deployment").values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            names |= set(env_of(container))
    assert names <= documented, names - documented


# --- resources against the bench --------------------------------------------------------

SESSIONS_PER_POD = 1_000  # where the bench's turn latency starts to grow (docs/operations.md)
BURST = 5  # the limit holds five pods' worth of sessions on one pod before an OOM kill


def benched_memory() -> tuple[dict[str, float], dict[str, float]]:
    """Per process, from bench/LATEST.md: MiB at rest (the highest the soak saw) and KiB per
    live session (the highest of the concurrency rows)."""
    at_rest: dict[str, float] = {}
    per_session: dict[str, float] = {}
    for figure in read_table((ROOT / "bench" / "LATEST.md").read_text()):
        if figure.unit == "MiB" and figure.name.startswith("resident memory: "):
            name = figure.name.removeprefix("resident memory: ")
            at_rest[name] = max(named_numbers(figure.value).values())
        elif figure.unit == "KiB/session":
            for name, kib in named_numbers(figure.value).items():
                per_session[name] = max(kib, per_session.get(name, 0.0))
    return at_rest, per_session


def mebibytes(quantity: str) -> float:
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)", quantity)
    assert match is not None, f"{quantity}: write memory in Ki, Mi or Gi"
    return int(match[1]) * {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}[match[2]]


def test_memory_requests_hold_the_benched_sessions(base: list[Doc]) -> None:
    at_rest, per_session = benched_memory()
    deployments = of_kind(base, "Deployment")
    assert set(deployments) <= set(at_rest) & set(per_session), "LATEST.md lacks a process"
    for name, deployment in deployments.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        resources = container["resources"]
        sessions = SESSIONS_PER_POD * per_session[name] / 1024
        needed = at_rest[name] + sessions
        assert mebibytes(resources["requests"]["memory"]) >= needed, (name, f"{needed:.0f} MiB")
        burst = at_rest[name] + BURST * sessions
        assert mebibytes(resources["limits"]["memory"]) >= burst, (name, f"{burst:.0f} MiB")


def test_memory_quantities_are_read_in_mebibytes() -> None:
    assert mebibytes("320Mi") == 320 and mebibytes("1Gi") == 1024 and mebibytes("512Ki") == 0.5
    with pytest.raises(AssertionError, match="Ki, Mi or Gi"):
        mebibytes("300M")


# --- compose ----------------------------------------------------------------------------

_VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME:?message}``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.groups()
        if env.get(name):
            return env[name]
        if op == "?":
            raise ValueError(f"{name}: {arg}")
        return arg or ""

    return _VARIABLE.sub(one, value)


USER_ENV = {"INTERNAL_API_KEY": "k-internal", "GATEWAY_API_KEYS": "dev-key:me"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    raw = yaml.safe_load((ROOT / "compose.yaml").read_text())  # resolves the anchors
    return dict(interpolate(raw, USER_ENV))


def test_compose_is_a_valid_compose_file(compose: dict[str, Any]) -> None:
    parsed = PyCompose.from_yaml(yaml.safe_dump(compose))
    assert set(parsed.service_names()) == {*PROCESSES, "postgres", "migrate", "prometheus"}
    broken = {**compose, "services": {**compose["services"], "hitl": {"imagee": "x"}}}
    with pytest.raises(ValueError, match="imagee"):
        PyCompose.from_yaml(yaml.safe_dump(broken))


def test_compose_needs_the_keys_it_cannot_invent() -> None:
    raw = yaml.safe_load((ROOT / "compose.yaml").read_text())
    with pytest.raises(ValueError, match="INTERNAL_API_KEY"):
        interpolate(raw, {"GATEWAY_API_KEYS": "k:u"})


def test_compose_runs_the_mesh_on_pgvector_with_grpc_health_checks(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    for name, spec in services.items():
        for needed in spec.get("depends_on", {}):
            assert needed in services, (name, needed)
    for name in PROCESSES:
        spec = services[name]
        assert spec["command"] == ["python", "-m", f"services.{name}"]
        env = {k: str(v) for k, v in spec["environment"].items()}
        settings = Settings.from_env(env)  # every value parses as the service would
        assert settings.database_url and settings.metrics_host == "0.0.0.0"
        assert set(env) <= documented_variables()
    for name, port in GRPC.items():
        test = services[name]["healthcheck"]["test"]
        assert test == ["CMD", "python", "-m", "services.common.healthcheck", f"127.0.0.1:{port}"]
        assert services[name]["environment"][f"{name.upper()}_ADDR"] == f"0.0.0.0:{port}"


def test_prometheus_scrapes_every_service(compose: dict[str, Any]) -> None:
    mount = compose["services"]["prometheus"]["volumes"][0].split(":")[0]
    config = yaml.safe_load((ROOT / mount).read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for group in job["static_configs"]
        for target in group["targets"]
    }
    assert targets == {f"{n}:{p + 1000}" for n, p in GRPC.items()} | {"gateway:8000"}


def test_the_image_runs_as_a_user_and_the_command_picks_the_service() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert len(stages) == 2 and all(s.startswith("python:3.11-slim") for s in stages)
    assert re.search(r"^USER 10001", text, flags=re.MULTILINE)
    assert os.path.exists(ROOT / ".dockerignore")


def test_the_dashboard_reads_metrics_the_services_export() -> None:
    from prometheus_client import REGISTRY

    import services.gateway.app
    import services.hitl.server
    import services.llmproxy.accounting
    import services.orchestrator.metrics  # noqa: F401

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    exported = {
        family.name + suffix
        for family in REGISTRY.collect()
        for suffix in suffixes.get(family.type, ("",))
    }
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "codelab-runtime.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(codelab_\w+)", target["expr"])
    }
    assert len(used) >= 7 and used <= exported, used - exported
