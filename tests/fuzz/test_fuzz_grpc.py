"""gRPC messages, fuzzed: any ClientMessage through Submit and the Stream is answered OK
or with a status carrying a seed error code, and nothing the runtime logs for it is an
INTERNAL_ERROR."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import given
from hypothesis import strategies as st

from codelab.v1 import common_pb2 as pb
from codelab.v1 import runtime_pb2, runtime_pb2_grpc
from services.common.channels import error_code
from tests.fuzz.conftest import FUZZ
from tests.support.mesh import INTERNAL_KEY, Mesh

CODES = set(pb.ErrorCode.keys()) - {"ERROR_CODE_UNSPECIFIED", "INTERNAL_ERROR"}
AUTH = (("x-internal-auth", INTERNAL_KEY),)
texts = st.text(max_size=24) | st.sampled_from(["{}", '{"a": 1}', "null", "[", "coder", "ask"])
SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_STRING: texts,
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_INT64: st.integers(-(2**40), 2**40),
    FieldDescriptor.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
}


def filled(descriptor: Descriptor) -> st.SearchStrategy[dict[str, Any]]:
    """Random values for any subset of a message's scalar and enum fields."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_ENUM:
            # Unknown enum numbers too: proto3 enums are open.
            fields[field.name] = st.integers(0, 40)
        elif field.type in SCALARS and not field.is_repeated:
            fields[field.name] = SCALARS[field.type]
    return st.fixed_dictionaries({}, optional=fields)


def client_message(kind: str) -> st.SearchStrategy[pb.ClientMessage]:
    descriptor = pb.ClientMessage.DESCRIPTOR.fields_by_name[kind].message_type
    assert descriptor is not None
    return st.builds(
        lambda values, cid: pb.ClientMessage(
            **{kind: getattr(pb, descriptor.name)(**values)},
            **({"client_message_id": cid} if cid is not None else {}),
        ),
        filled(descriptor),
        st.none() | texts,
    )


KINDS = [f.name for f in pb.ClientMessage.DESCRIPTOR.oneofs_by_name["message"].fields]
messages = st.sampled_from(KINDS).flatmap(client_message)


@pytest.fixture
def runtime(fuzz_mesh: Mesh) -> Iterator[runtime_pb2_grpc.AgentRuntimeStub]:
    with grpc.insecure_channel(fuzz_mesh.settings.orchestrator_addr) as channel:
        yield runtime_pb2_grpc.AgentRuntimeStub(channel)


def answered(call: Any) -> None:
    try:
        call()
    except grpc.RpcError as error:
        assert isinstance(error, grpc.Call)
        code = error_code(error)
        assert code in CODES, (error.code(), error.details())


@FUZZ
@given(message=messages, session=texts)
def submit_any(
    runtime: runtime_pb2_grpc.AgentRuntimeStub, message: pb.ClientMessage, session: str
) -> None:
    request = runtime_pb2.SubmitRequest(session_id=session or "fuzz-grpc", message=message)
    answered(lambda: runtime.Submit(request, metadata=AUTH, timeout=20))


async def logged_errors(dsn: str) -> list[str]:
    """Error codes in the event log once it stopped growing (the messages were handled)."""
    conn = await asyncpg.connect(dsn)
    try:
        last = -1
        async with asyncio.timeout(60):
            while (
                count := await conn.fetchval("select count(*) from orchestrator.events")
            ) != last:
                last = count
                await asyncio.sleep(1.0)
        rows = await conn.fetch("select event from orchestrator.events where type = 'error'")
    finally:
        await conn.close()
    return [
        pb.ErrorCode.Name(pb.ServerEvent.FromString(bytes(r["event"])).error.error_code)
        for r in rows
    ]


def test_submit_answers_any_message_and_none_ends_in_internal_error(
    runtime: runtime_pb2_grpc.AgentRuntimeStub, database_url: str
) -> None:
    submit_any(runtime)
    codes = asyncio.run(logged_errors(database_url))
    assert set(codes) <= CODES, sorted(set(codes) - CODES)


@FUZZ
@given(first=messages)
def test_a_stream_refuses_any_opening_but_attach_with_a_seed_code(
    runtime: runtime_pb2_grpc.AgentRuntimeStub, first: pb.ClientMessage
) -> None:
    def open_stream() -> None:
        replies = runtime.Stream(iter([first]), metadata=AUTH, timeout=5)
        next(replies, None)

    if first.HasField("attach") and first.attach.session_id:
        return  # a valid opening: the stream would wait for events
    answered(open_stream)
