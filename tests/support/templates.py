"""Changing a served agent template through the admin API, for flow tests."""

from __future__ import annotations

import json
from typing import Any

from codelab.v1 import admin_pb2
from tests.support.mesh import Mesh


async def update_template(mesh: Mesh, name: str, **sections: dict[str, Any]) -> None:
    """Write a new version of ``name`` with ``sections`` merged into its definition."""
    current = await mesh.client.admin.GetTemplate(admin_pb2.GetTemplateRequest(name=name))
    definition = json.loads(current.definition_json)
    for section, values in sections.items():
        definition[section] = {**definition.get(section, {}), **values}
    await mesh.client.admin.UpsertTemplate(
        admin_pb2.UpsertTemplateRequest(definition_json=json.dumps(definition))
    )
