"""The gateway's OpenAPI, fuzzed by Schemathesis: no 5xx (a 503 only as SERVICE_UNAVAILABLE:
the mesh is up, nothing else may be unavailable), and every refusal, 404s included,
carries a seed error code: in the gateway's JSON shape or, on /v1, in an OpenAI error body."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import given, settings
from schemathesis import Case
from schemathesis.core.result import Ok

from codelab.v1 import common_pb2 as pb
from tests.fuzz.conftest import EXAMPLES, FUZZ
from tests.support.mesh import Mesh

CODES = set(pb.ErrorCode.keys()) - {"ERROR_CODE_UNSPECIFIED", "INTERNAL_ERROR"}
# Streams that never end by themselves (they follow a session) are driven elsewhere.
ENDLESS = ["/sessions/{session_id}/stream"]


@pytest.fixture
def gateway_schema(fuzz_mesh: Mesh) -> Iterator[schemathesis.BaseSchema]:
    schema = schemathesis.openapi.from_url(fuzz_mesh.gateway_url + "/openapi.json")
    yield schema.exclude(path=ENDLESS)


def json_of(response: Any) -> object:
    try:
        return response.json()
    except ValueError:
        return None


def openai_code(body: object) -> str | None:
    """The code of an OpenAI error body ``{"error": {message, type, param, code}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not {"message", "type", "code"} <= error.keys():
        return None
    return str(error["code"])


def gateway_code(body: object) -> str | None:
    """The code of the gateway's error body ``{"type": "error", "error_code", ...}``."""
    code = body.get("error_code") if isinstance(body, dict) else None
    return str(code) if code is not None else None


def check(case: Case[Any]) -> None:
    response = case.call(timeout=30)
    status, body = response.status_code, json_of(response)
    where = (case.method, case.formatted_path, status, response.text[:300])
    assert status < 500 or status == 503, where
    if status < 400:
        return
    code = openai_code(body) if case.path.startswith("/v1/") else gateway_code(body)
    assert code is not None, where
    if status == 503:
        assert code == "SERVICE_UNAVAILABLE", where
    else:
        assert code in CODES, where


def test_every_route_answers_bad_input_with_a_seed_code(
    gateway_schema: schemathesis.BaseSchema,
) -> None:
    # Schemathesis's own pytest plugin predates this pytest: its strategies, driven here,
    # a share of the examples for each operation.
    per_operation = settings(FUZZ, max_examples=max(3, EXAMPLES // 5))
    operations = [r.ok() for r in gateway_schema.get_all_operations() if isinstance(r, Ok)]
    assert len(operations) > 20
    for operation in operations:
        per_operation(given(case=operation.as_strategy())(check))()
