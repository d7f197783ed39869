"""SSE framing and chunk assembly of llmproxy, on raw bytes as the network delivers them."""

from __future__ import annotations

import json

import pytest

from services.llmproxy.assembly import Assembly
from services.llmproxy.errors import LlmError, LlmStreamInterrupted
from services.llmproxy.sse import SseParser


def frames(*payloads: str) -> bytes:
    return b"".join(f"data: {p}\n\n".encode() for p in payloads)


def test_every_event_of_one_block_comes_out_together() -> None:
    assert SseParser().feed(frames("a", "b", "[DONE]")) == [b"a", b"b", b"[DONE]"]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_events_split_anywhere_across_blocks_reassemble(size: int) -> None:
    body = frames('{"x": 1}', '{"y": "two words"}', "[DONE]")
    parser = SseParser()
    out = [p for i in range(0, len(body), size) for p in parser.feed(body[i : i + size])]
    assert out == [b'{"x": 1}', b'{"y": "two words"}', b"[DONE]"]


def test_crlf_and_cr_line_ends_multi_line_data_and_comments() -> None:
    parser = SseParser()
    body = b": keep-alive\r\ndata: one\r\ndata:two\r\n\r\nevent: x\rdata: three\r\r"
    out = [p for i in range(len(body)) for p in parser.feed(body[i : i + 1])]
    out += parser.close()
    assert out == [b"one\ntwo", b"three"]


def test_a_body_without_the_last_blank_line_still_completes_its_event() -> None:
    parser = SseParser()
    assert parser.feed(b"data: last") == []
    assert parser.close() == [b"last"]


def chunk(**delta: object) -> dict[str, object]:
    return {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_text_tool_calls_usage_and_finish_assemble() -> None:
    assembly = Assembly()
    assert assembly.add(chunk(role="assistant", content="")) == ""
    assert assembly.add(chunk(content="Hel")) == "Hel"
    assert assembly.add(chunk(content="lo")) == "lo"
    header = {"index": 0, "id": "c1", "type": "function", "function": {"name": "read_file"}}
    assembly.add(chunk(tool_calls=[header]))
    assembly.add(chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"pa'}}]))
    assembly.add(chunk(tool_calls=[{"index": 0, "function": {"arguments": 'th": "a"}'}}]))
    assembly.add(
        {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    )
    assembly.add(
        {"model": "m2", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    )
    assert assembly.tool_calls() == [("c1", "read_file", '{"path": "a"}')]
    assert (assembly.finish_reason, assembly.model, assembly.tokens()) == (
        "tool_calls",
        "m2",
        (5, 2),
    )
    assert json.loads(assembly.tool_calls()[0][2]) == {"path": "a"}


def test_parallel_calls_keep_their_order_by_index() -> None:
    assembly = Assembly()
    for index, name in ((1, "b"), (0, "a")):
        assembly.add(
            chunk(tool_calls=[{"index": index, "id": f"c{index}", "function": {"name": name}}])
        )
    assembly.add(chunk(tool_calls=[{"index": 1, "function": {"arguments": "{}"}}]))
    assert [c[1] for c in assembly.tool_calls()] == ["a", "b"]


def test_an_error_chunk_is_an_llm_error_and_garbage_is_an_interruption() -> None:
    with pytest.raises(LlmError, match="overloaded"):
        Assembly().add({"error": {"message": "overloaded"}})
    with pytest.raises(LlmStreamInterrupted):
        Assembly().add(["not", "an", "object"])


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_deltas_are_kept_apart_from_the_answer(field: str) -> None:
    assembly = Assembly()
    assert assembly.add(chunk(**{field: "First, "})) == ""
    assert assembly.add(chunk(**{field: "think."})) == ""
    assert assembly.take_reasoning() == "First, think."
    assert assembly.take_reasoning() == ""
    assert assembly.add(chunk(content="Answer", **{field: None})) == "Answer"
    assert assembly.take_reasoning() == ""
    assert assembly.reasoning_chars == len("First, think.")


def test_reported_reasoning_tokens_are_read_from_the_usage_details() -> None:
    assembly = Assembly()
    assert assembly.reasoning_tokens() is None
    assembly.add(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 5,
                "completion_tokens": 9,
                "completion_tokens_details": {"reasoning_tokens": 6},
            },
        }
    )
    assert assembly.reasoning_tokens() == 6
    assert assembly.tokens() == (5, 9)
