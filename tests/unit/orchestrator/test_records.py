"""What a finished call leaves behind: sources for reads, artifacts for confirmed writes,
nothing for anything that did not complete."""

from __future__ import annotations

from typing import Any

import pytest

from services.orchestrator.turn.ledger import LedgerCall
from services.orchestrator.turn.records import call_records


def call(tool: str, arguments: Any) -> LedgerCall:
    return LedgerCall("c1", "s1", "coder", tool, arguments, "ide", "dispatched")


def test_reads_leave_sources() -> None:
    assert call_records(call("read_file", {"path": "a.py"}), "completed").sources == [
        ("file", "a.py")
    ]
    found = call_records(call("search_in_code", {"query": "def main"}), "completed")
    assert (found.sources, found.artifacts) == ([("search", "def main")], [])
    assert call_records(call("list_files", {}), "completed").sources == [("directory", ".")]
    assert call_records(call("search_in_code", {"query": ""}), "completed").sources == []


def test_a_patch_leaves_an_artifact_per_file_it_touches() -> None:
    patch = "--- a/x.py\n+++ b/x.py\n@@\n--- a/gone.py\n+++ /dev/null\n+++ b/new.py\n"
    found = call_records(call("apply_patch", {"patch": patch}), "completed")
    assert found.artifacts == [("patch", "x.py", len(patch)), ("patch", "new.py", len(patch))]
    written = call_records(call("write_file", {"path": "n.md", "content": "# N"}), "completed")
    assert written.artifacts == [("file", "n.md", 3)]


@pytest.mark.parametrize("state", ["failed", "rejected", "timed_out", "cancelled"])
def test_a_call_that_did_not_complete_leaves_nothing(state: str) -> None:
    found = call_records(call("write_file", {"path": "n.md", "content": "x"}), state)
    assert (found.sources, found.artifacts) == ([], [])


def test_raw_arguments_leave_nothing() -> None:
    found = call_records(call("read_file", '{"path": '), "completed")
    assert (found.sources, found.artifacts) == ([], [])
