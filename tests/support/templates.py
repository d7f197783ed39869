"""Changing a served agent template through the admin API, for flow tests."""

from __future__ import annotations

import json
from typing import Any

from codelab.v1 import admin_pb2
from tests.support.mesh import Mesh


def lead_template(*tools: str) -> dict[str, Any]:
    """A delegating 'lead' agent that may read files and call ``tools`` (``agent.<name>``)."""
    return {
        "name": "lead",
        "display_name": "Lead Agent",
        "description": "Splits work and delegates to specialists",
        "system_prompt": "You are the lead. Delegate questions to the ask agent.",
        "allowed_tools": ["read_file", *tools],
        "llm": {},
        "execution": {"max_iterations": 10, "max_tool_calls": 20, "max_invalid_arguments": 3},
    }


async def update_template(mesh: Mesh, name: str, **sections: dict[str, Any]) -> None:
    """Write a new version of ``name`` with ``sections`` merged into its definition."""
    current = await mesh.client.admin.GetTemplate(admin_pb2.GetTemplateRequest(name=name))
    definition = json.loads(current.definition_json)
    for section, values in sections.items():
        definition[section] = {**definition.get(section, {}), **values}
    await mesh.client.admin.UpsertTemplate(
        admin_pb2.UpsertTemplateRequest(definition_json=json.dumps(definition))
    )
