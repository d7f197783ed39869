"""Each gRPC service on its own: auth, health, reflection, llmproxy, toolsearch, hitl."""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from codelab.v1 import (
    hitl_pb2,
    llmproxy_pb2,
    llmproxy_pb2_grpc,
    runtime_pb2,
    runtime_pb2_grpc,
    toolsearch_pb2,
)
from services.common.channels import error_code, internal_channel
from tests.support.mesh import Mesh

SERVICES = {
    "orchestrator": "codelab.v1.AgentRuntime",
    "toolsearch": "codelab.v1.ToolSearch",
    "hitl": "codelab.v1.Hitl",
    "llmproxy": "codelab.v1.LlmProxy",
}


def address(mesh: Mesh, name: str) -> str:
    return str(getattr(mesh.settings, f"{name}_addr"))


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_health_is_serving_and_needs_no_key(mesh: Mesh, name: str) -> None:
    async with grpc.aio.insecure_channel(address(mesh, name)) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICES[name]):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("name", sorted(SERVICES))
async def test_reflection_lists_the_service(mesh: Mesh, name: str) -> None:
    async with grpc.aio.insecure_channel(address(mesh, name)) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for reply in stub.ServerReflectionInfo(iter([request])):
            names = {s.name for s in reply.list_services_response.service}
            break
    assert {SERVICES[name], "grpc.health.v1.Health"} <= names


@pytest.mark.parametrize("key", [None, "wrong-key"])
async def test_calls_without_the_internal_key_are_unauthenticated(
    mesh: Mesh, key: str | None
) -> None:
    metadata = (("x-internal-auth", key),) if key else ()
    async with grpc.aio.insecure_channel(mesh.settings.orchestrator_addr) as channel:
        runtime = runtime_pb2_grpc.AgentRuntimeStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runtime.ListSessions(runtime_pb2.ListSessionsRequest(), metadata=metadata)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error_code(caught.value) == "UNAUTHORIZED"
    async with grpc.aio.insecure_channel(mesh.settings.llmproxy_addr) as channel:
        llm = llmproxy_pb2_grpc.LlmProxyStub(channel)
        call = llm.Complete(llmproxy_pb2.CompleteRequest(), metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_an_internal_channel_adds_the_key_beside_the_callers_metadata(mesh: Mesh) -> None:
    key = mesh.settings.internal_api_key
    async with internal_channel(mesh.settings.orchestrator_addr, key) as channel:
        runtime = runtime_pb2_grpc.AgentRuntimeStub(channel)
        request = runtime_pb2.ListSessionsRequest()
        await runtime.ListSessions(request, metadata=(("x-request-id", "r-1"),))  # admitted
    async with internal_channel(mesh.settings.llmproxy_addr, key) as channel:
        call = llmproxy_pb2_grpc.LlmProxyStub(channel).Complete(llmproxy_pb2.CompleteRequest())
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        # Past the key check: the empty request itself is refused.
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def complete_request(text: str, **kwargs: object) -> llmproxy_pb2.CompleteRequest:
    return llmproxy_pb2.CompleteRequest(
        session_id="s-llm",
        purpose="test",
        messages=[llmproxy_pb2.ChatMessage(role="user", content=text)],
        **kwargs,  # type: ignore[arg-type]
    )


async def test_llmproxy_assembles_tool_calls_from_deltas(mesh: Mesh) -> None:
    arguments = {"path": "src/app.py", "content": "print('hi')\n" * 20, "n": 3}
    mesh.scripted.enqueue(
        {
            "tool_calls": [
                {"name": "write_file", "arguments": arguments},
                {"name": "list_files", "arguments": {"path": "."}},
            ]
        }
    )
    tools = [llmproxy_pb2.ToolDefinition(name="write_file", parameters_json='{"type":"object"}')]
    chunks = [c async for c in mesh.client.llmproxy.Complete(complete_request("go", tools=tools))]
    calls = [c.tool_call for c in chunks if c.HasField("tool_call")]
    assert [c.name for c in calls] == ["write_file", "list_files"]
    assert json.loads(calls[0].arguments_json) == arguments
    assert calls[0].id and calls[0].id != calls[1].id
    assert chunks[-1].finish.finish_reason == "tool_calls"
    assert mesh.scripted.requests[-1]["tools"][0]["function"]["name"] == "write_file"


async def test_llmproxy_per_call_timeout_is_llm_timeout(mesh: Mesh) -> None:
    mesh.scripted.enqueue({"text": "late", "first_token_delay_ms": 3000})
    call = mesh.client.llmproxy.Complete(complete_request("slow", timeout_seconds=0.3))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert error_code(caught.value) == "LLM_TIMEOUT"


async def test_llmproxy_records_usage_per_session(mesh: Mesh) -> None:
    mesh.scripted.enqueue(
        {"text": "one two three", "usage": {"prompt_tokens": 11, "completion_tokens": 3}},
        {"error": {"status": 400, "message": "nope"}},
    )
    async for _ in mesh.client.llmproxy.Complete(complete_request("a")):
        pass
    with pytest.raises(grpc.aio.AioRpcError):
        async for _ in mesh.client.llmproxy.Complete(complete_request("b")):
            pass
    usage = await mesh.client.llmproxy.GetUsage(llmproxy_pb2.GetUsageRequest(session_id="s-llm"))
    assert (usage.total_requests, usage.successful_requests, usage.failed_requests) == (2, 1, 1)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (11, 3, 14)
    assert usage.average_duration_ms > 0


async def test_llmproxy_rejects_empty_messages(mesh: Mesh) -> None:
    call = mesh.client.llmproxy.Complete(llmproxy_pb2.CompleteRequest(session_id="s"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_llmproxy_embeddings(mesh: Mesh) -> None:
    reply = await mesh.client.llmproxy.Embed(
        llmproxy_pb2.EmbedRequest(inputs=["read a file", "list the directory"])
    )
    assert len(reply.embeddings) == 2
    assert len(reply.embeddings[0].values) == 384


async def test_toolsearch_lists_the_builtin_catalog(mesh: Mesh) -> None:
    reply = await mesh.client.toolsearch.ListTools(toolsearch_pb2.ListToolsRequest())
    names = {t.name for t in reply.tools}
    assert {"read_file", "write_file", "execute_command", "git.diff", "create_plan"} <= names
    schema = json.loads(next(t for t in reply.tools if t.name == "write_file").parameters_json)
    assert schema["required"] == ["path", "content"]


async def test_toolsearch_finds_tools_by_meaning_of_words(mesh: Mesh) -> None:
    reply = await mesh.client.toolsearch.SearchTools(
        toolsearch_pb2.SearchToolsRequest(query="run a shell command", top_k=3)
    )
    assert reply.results[0].tool.name in {"execute_command", "run_command"}
    scoped = await mesh.client.toolsearch.SearchTools(
        toolsearch_pb2.SearchToolsRequest(query="file", top_k=10, allowed=["read_file"])
    )
    assert [r.tool.name for r in scoped.results] == ["read_file"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.client.toolsearch.SearchTools(toolsearch_pb2.SearchToolsRequest(query=" "))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_hitl_evaluates_through_grpc(mesh: Mesh) -> None:
    write = await mesh.client.hitl.Evaluate(
        hitl_pb2.EvaluateRequest(tool_name="write_file", arguments_json='{"path":"a.py"}')
    )
    assert write.requires_approval and write.reason
    safe = await mesh.client.hitl.Evaluate(
        hitl_pb2.EvaluateRequest(tool_name="execute_command", arguments_json='{"command":"ls -la"}')
    )
    assert not safe.requires_approval
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mesh.client.hitl.Evaluate(
            hitl_pb2.EvaluateRequest(tool_name="write_file", arguments_json="[1]")
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_llmproxy_sends_valid_tool_names_and_maps_the_reply_back(mesh: Mesh) -> None:
    """Catalog names such as ``git.diff`` are not valid OpenAI function names: the upstream
    sees ``git_diff`` (tools and history alike) and the runtime gets ``git.diff`` back."""
    mesh.scripted.enqueue({"tool_calls": [{"name": "git_diff", "arguments": {}}]})
    request = complete_request(
        "diff it",
        tools=[
            llmproxy_pb2.ToolDefinition(name="git.diff", parameters_json='{"type":"object"}'),
            llmproxy_pb2.ToolDefinition(name="agent.ask", parameters_json='{"type":"object"}'),
        ],
    )
    request.messages.extend(
        [
            llmproxy_pb2.ChatMessage(
                role="assistant",
                tool_calls=[
                    llmproxy_pb2.LlmToolCall(id="c1", name="git.diff", arguments_json="{}")
                ],
            ),
            llmproxy_pb2.ChatMessage(role="tool", content="no changes", tool_call_id="c1"),
            llmproxy_pb2.ChatMessage(role="user", content="again"),
        ]
    )
    chunks = [c async for c in mesh.client.llmproxy.Complete(request)]
    calls = [c.tool_call for c in chunks if c.HasField("tool_call")]
    assert [c.name for c in calls] == ["git.diff"]
    sent = mesh.scripted.requests[-1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["git_diff", "agent_ask"]
    assert sent["messages"][1]["tool_calls"][0]["function"]["name"] == "git_diff"
