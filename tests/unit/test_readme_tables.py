"""README's tables name every event type and every error code the protos define."""

from __future__ import annotations

import re
from pathlib import Path

from codelab.v1 import common_pb2

README = Path(__file__).resolve().parents[2] / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _first_cells(section: str) -> set[str]:
    """Every name in the first column of the section's table rows."""
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            names.update(re.findall(r"[A-Za-z_]+", line.split("|")[1]))
    return names


def test_every_server_event_type_has_a_row() -> None:
    fields = common_pb2.ServerEvent.DESCRIPTOR.oneofs_by_name["event"].fields
    listed = _first_cells(_section("Events, error codes, budgets"))
    assert {field.name for field in fields} - listed == set()


def test_every_error_code_has_a_row() -> None:
    codes = {v.name for v in common_pb2.ErrorCode.DESCRIPTOR.values} - {"ERROR_CODE_UNSPECIFIED"}
    listed = _first_cells(_section("Events, error codes, budgets"))
    assert codes - listed == set()
