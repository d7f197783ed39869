"""One chunk union on both sides of the llmproxy wire: what llmproxy sends, the
orchestrator's client reads back unchanged."""

from __future__ import annotations

import pytest

from services.common.model_stream import (
    ModelFinished,
    ModelOutput,
    ModelToolCall,
    ReasoningPiece,
    TextPiece,
)
from services.llmproxy.servicer import output_to_proto
from services.llmproxy.tool_names import ToolNames
from services.orchestrator.peers.llm import output_from_proto


@pytest.mark.parametrize(
    "piece",
    [
        TextPiece("Hello, "),
        ReasoningPiece("the user wants a greeting"),
        ModelToolCall("call_1", "read_file", '{"path": "a.py"}'),
        ModelFinished("tool_calls", 120, 35, "gpt-test", 12),
        ModelFinished("stop", 0, 0),
    ],
)
def test_every_piece_survives_the_wire(piece: ModelOutput) -> None:
    assert output_from_proto(output_to_proto(piece, ToolNames(["read_file"]))) == piece


def test_a_renamed_tool_comes_back_under_its_catalog_name() -> None:
    names = ToolNames(["git.diff"])
    wire = names.to_wire("git.diff")
    assert wire != "git.diff"  # dots are not allowed upstream
    chunk = output_to_proto(ModelToolCall("c", wire, "{}"), names)
    assert output_from_proto(chunk) == ModelToolCall("c", "git.diff", "{}")


def test_the_finish_carries_the_total_of_its_tokens() -> None:
    chunk = output_to_proto(ModelFinished("stop", 7, 5, "m", 2), ToolNames([]))
    assert chunk.finish.usage.total_tokens == 12
    assert chunk.finish.usage.reasoning_tokens == 2
