"""codelab and /playground against `make run`'s mesh: the supervisor's separate processes,
the scripted model driven over its HTTP control endpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from tests.e2e.conftest import MeshProcess
from tests.faces.browser import chromium, playground, send, settled
from tests.faces.cli_support import run_codelab

pytestmark = pytest.mark.e2e


async def script(mesh: MeshProcess, *scenarios: dict[str, Any]) -> None:
    """Queue the model's next answers; forget the requests it saw so far."""
    async with httpx.AsyncClient(base_url=mesh.model, timeout=10) as http:
        (await http.delete("/_scripted/requests")).raise_for_status()
        (
            await http.post("/_scripted/scenarios", json={"scenarios": list(scenarios)})
        ).raise_for_status()


async def tool_messages(mesh: MeshProcess) -> list[str]:
    async with httpx.AsyncClient(base_url=mesh.model, timeout=10) as http:
        requests = (await http.get("/_scripted/requests")).json()
    return [m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"]


async def test_codelab_json_mode_runs_a_tool_in_the_folder(
    real_mesh: MeshProcess, tmp_path: Path
) -> None:
    (tmp_path / "main.py").write_text("print('from the folder')\n")
    await script(
        real_mesh,
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "main.py"}}]},
        {"text": "It prints a greeting."},
    )
    code, events, err = await run_codelab(
        "-p", "what does main.py do?", "--json", "--agent", "ask",
        "--session", "e2e-cli", "--url", real_mesh.gateway, cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert (events[-1]["type"], events[-1]["status"]) == ("done", "completed")
    (call,) = [e for e in events if e["type"] == "tool_call"]
    assert call["tool_name"] == "read_file" and call["requires_approval"] is False
    text = "".join(e.get("token", "") for e in events if e["type"] == "assistant_message")
    assert text == "It prints a greeting."
    assert await tool_messages(real_mesh) == [json.dumps("print('from the folder')\n")]
    assert {e["session_id"] for e in events} == {"e2e-cli"}


async def test_playground_write_approved_and_simulated(real_mesh: MeshProcess) -> None:
    write = {"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\n"}}
    await script(real_mesh, {"tool_calls": [write]}, {"text": "Wrote **a.py**."})
    async with chromium() as browser, playground(browser, real_mesh.gateway, "e2e-web") as page:
        await send(page, "write a.py", agent="coder")
        card = page.get_by_test_id("approval-card")
        await expect(card.locator(".diff .add")).to_have_text("+ x = 1")
        await card.get_by_test_id("approve").click()
        await page.get_by_test_id("tool-card").get_by_test_id("simulate").click()
        await settled(page)
        answer = page.get_by_test_id("assistant").last
        await expect(answer).to_contain_text("Wrote a.py.")
        assert await answer.locator("strong").inner_text() == "a.py"
        await expect(page.locator("#usage [data-usage=total_requests]")).to_have_text("2")
    told = await tool_messages(real_mesh)
    assert json.loads(told[-1]) == {"path": "a.py", "bytes_written": 6}
