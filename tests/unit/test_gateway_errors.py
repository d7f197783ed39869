"""The gateway's one error table and its exception root: every spec code and every kind of
failure reaches HTTP and the WebSocket the same way, whichever path it took."""

from __future__ import annotations

import json

import grpc
import pytest

from codelab.v1 import common_pb2 as pb
from services.common.errors import ErrorKind
from services.common.interceptors import STATUS_BY_KIND
from services.gateway.errors import (
    KIND_OF_CODE,
    TRANSPORT,
    AdminRefused,
    Forbidden,
    GatewayError,
    OpenAIError,
    ProtocolError,
    Unauthorized,
    kind_of_code,
    kind_of_status,
)

# A turn's error event, as an HTTP status (the OpenAI face): the client's mistakes 400.
HTTP_OF_CODE = {
    "LLM_TIMEOUT": 504, "LLM_PROXY_UNAVAILABLE": 503, "SERVICE_UNAVAILABLE": 503,
    "DB_CONNECTION_ERROR": 503, "SESSION_NOT_FOUND": 404, "UNAUTHORIZED": 401,
    "TURN_IN_PROGRESS": 409, "INVALID_MESSAGE_TYPE": 400, "MISSING_REQUIRED_FIELD": 400,
    "INVALID_MESSAGE": 400, "TOOL_VALIDATION_ERROR": 400, "FILE_RESTRICTION_ERROR": 400,
    "INVALID_DECISION": 400, "PENDING_APPROVAL_NOT_FOUND": 400, "TOOL_CALL_NOT_FOUND": 400,
    "AGENT_NOT_FOUND": 400, "HITL_TIMEOUT": 400, "CANCELLED": 400, "RATE_LIMITED": 429,
    "BUDGET_EXCEEDED": 429, "LLM_CONTEXT_LENGTH_EXCEEDED": 400,
}  # fmt: skip
# A failed mesh call, by its gRPC status.
HTTP_OF_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409, grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504, grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.ABORTED: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
}  # fmt: skip


def test_every_spec_error_code_has_a_kind() -> None:
    assert set(pb.ErrorCode.keys()) == set(KIND_OF_CODE)


def test_every_kind_has_an_http_status_and_a_close_code() -> None:
    assert set(TRANSPORT) == set(ErrorKind)


@pytest.mark.parametrize("code", pb.ErrorCode.keys())
def test_an_error_event_gets_its_codes_status(code: str) -> None:
    assert TRANSPORT[kind_of_code(code)].http == HTTP_OF_CODE.get(code, 502)


@pytest.mark.parametrize("status", list(grpc.StatusCode))
def test_a_failed_mesh_call_gets_its_statuses_http_status(status: grpc.StatusCode) -> None:
    assert TRANSPORT[kind_of_status(status)].http == HTTP_OF_STATUS.get(status, 502)


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_a_kind_survives_the_services_interceptor(kind: ErrorKind) -> None:
    assert kind_of_status(STATUS_BY_KIND[kind]) is kind


def test_only_a_refused_credential_closes_the_socket_as_a_policy_violation() -> None:
    policy = {kind for kind, row in TRANSPORT.items() if row.ws_close == 1008}
    assert policy == {ErrorKind.UNAUTHENTICATED, ErrorKind.PERMISSION}
    assert {row.ws_close for row in TRANSPORT.values()} == {1008, 1013}


def test_an_unknown_code_is_the_mesh_failing() -> None:
    assert kind_of_code("NOT_A_CODE") is ErrorKind.INTERNAL


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (Unauthorized("no key"), 401, "UNAUTHORIZED"),
        (Forbidden("admins only"), 403, "UNAUTHORIZED"),
        (ProtocolError("INVALID_DECISION", "no such decision"), 400, "INVALID_DECISION"),
        (AdminRefused(404, "TOOL_VALIDATION_ERROR", "no such tool"), 404, "TOOL_VALIDATION_ERROR"),
    ],
)
def test_the_gateways_refusals_share_one_root_and_one_body(
    error: GatewayError, status: int, code: str
) -> None:
    response = error.response()
    assert isinstance(error, GatewayError) and response.status_code == status
    body = json.loads(bytes(response.body))
    assert body == {"type": "error", "error_code": code, "content": str(error), "details": {}}


def test_an_openai_error_keeps_openais_shape() -> None:
    error = OpenAIError.of_code("LLM_TIMEOUT", "too slow")
    assert isinstance(error, GatewayError) and error.status == 504
    body = json.loads(bytes(error.response().body))
    assert body == {
        "error": {
            "message": "too slow",
            "type": "server_error",
            "param": None,
            "code": "LLM_TIMEOUT",
        }
    }
