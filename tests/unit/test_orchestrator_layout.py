"""The orchestrator's boundaries, checked on its source: no import cycle, gRPC only at the
transport and peer edges, no generated type in the turn or the agents, no other service's
code imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "services" / "orchestrator"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports (``from a import b``: ``a`` and ``a.b``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {name: {m for m in imports(path) if m in MODULES} for name, path in MODULES.items()}


def cycle_from(start: str) -> list[str] | None:
    """An import path from ``start`` back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        for target in GRAPH[name]:
            if target == start:
                return [*path, start]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*path, target]))
    return None


def test_no_module_of_the_orchestrator_imports_itself_back() -> None:
    cycles = [cycle for name in GRAPH if (cycle := cycle_from(name))]
    assert cycles == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_grpc_is_used_at_the_edges_only(name: str) -> None:
    edge = name.split(".")[2:3] in (["transport"], ["peers"], ["server"])
    uses_grpc = any(
        m == "grpc" or m.startswith("grpc.") or m.endswith("_pb2_grpc")
        for m in imports(MODULES[name])
    )
    assert edge or not uses_grpc


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if n.split(".")[2:3] in (["turn"], ["agents"]))
)
def test_the_turn_and_the_agents_hold_no_generated_type(name: str) -> None:
    assert not [m for m in imports(MODULES[name]) if m.startswith("codelab.")]


def test_the_orchestrator_imports_no_other_service() -> None:
    others = {
        (name, m)
        for name, path in MODULES.items()
        for m in imports(path)
        if m.startswith("services.")
        and not m.startswith(("services.orchestrator", "services.common"))
    }
    assert others == set()
