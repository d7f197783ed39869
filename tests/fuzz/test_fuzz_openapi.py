"""The gateway's OpenAPI, fuzzed by Schemathesis: no 5xx but the 503 of a service that is
away, and every refusal carries a seed error code (the IDE's JSON shape or, on /v1,
OpenAI's)."""

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


def refusal_code(case: Case[Any], body: object) -> str | None:
    """The error code of a refusal body, in whichever shape the route speaks."""
    if not isinstance(body, dict):
        return None
    if case.path.startswith("/v1/"):
        error = body.get("error")
        return str(error.get("code")) if isinstance(error, dict) else None
    code = body.get("error_code")
    return str(code) if code is not None else None


def check(case: Case[Any]) -> None:
    response = case.call(timeout=30)
    assert response.status_code < 500 or response.status_code == 503, (
        case.method,
        case.path,
        response.status_code,
        response.text[:300],
    )
    if response.status_code >= 400 and response.status_code != 404:
        code = refusal_code(case, response.json())
        assert code is not None, (case.path, response.status_code, response.text[:300])
        assert code in CODES or case.path.startswith("/v1/"), (case.path, code)


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
