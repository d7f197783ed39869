"""/playground in a real Chromium against the mesh: a streamed answer, a write approved with an
edit, a plan approved and completed, a reload that resumes, API keys, a patch review, and
reasoning in the inspector."""

from __future__ import annotations

import json

import httpx
from playwright.async_api import Browser, expect

from tests.faces.browser import playground, send, settled
from tests.support.mesh import Mesh, running_mesh

PLAN = {
    "goal": "Add logging",
    "subtasks": [
        {"description": "Design the logging", "agent": "architect", "estimated_time": "5 min"},
        {"description": "Read the API", "agent": "coder", "estimated_time": "5 min"},
    ],
}


async def test_the_page_is_served_as_static_files(mesh: Mesh) -> None:
    async with httpx.AsyncClient(base_url=mesh.gateway_url) as http:
        moved = await http.get("/playground")
        index = await http.get("/playground/")
        script = await http.get("/playground/app.js")
        missing = await http.get("/playground/nope.js")
    assert moved.status_code == 307 and moved.headers["location"] == "/playground/"
    assert index.status_code == 200 and "CodeLab playground" in index.text
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert missing.status_code == 404


async def test_a_streamed_answer_with_agent_events_and_usage(mesh: Mesh, browser: Browser) -> None:
    mesh.scripted.enqueue({"text": "Here is **bold** and `code`.", "chunk_size": 4})
    async with playground(browser, mesh.gateway_url, "web-stream") as page:
        await send(page, "explain", agent="ask")
        await settled(page)
        answer = page.get_by_test_id("assistant").last
        await expect(answer).to_contain_text("Here is bold and code.")
        assert await answer.locator("strong").inner_text() == "bold"
        assert await answer.locator("code").inner_text() == "code"
        await expect(page.get_by_test_id("switches")).to_contain_text("orchestrator → ask")
        await expect(page.get_by_test_id("agent-badge")).to_have_text("orchestrator")
        await expect(page.locator("#usage [data-usage=total_requests]")).to_have_text("1")
        types = await page.locator("#events tbody tr td:nth-child(2)").all_inner_texts()
        assert "done" in types and "assistant_message" in types
        await expect(page.locator("#sessions [data-session=web-stream]")).to_be_visible()


async def test_a_write_approved_with_an_edit(mesh: Mesh, browser: Browser) -> None:
    mesh.scripted.enqueue(
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\n"}}
            ]
        },
        {"text": "Written."},
    )
    async with playground(browser, mesh.gateway_url, "web-edit") as page:
        await send(page, "write a.py", agent="coder")
        card = page.get_by_test_id("approval-card")
        await expect(card.locator(".diff .add")).to_have_text("+ x = 1")
        await card.get_by_test_id("edit").click()
        edited = {"path": "a.py", "content": "x = 2\n"}
        await card.get_by_test_id("edit-arguments").fill(json.dumps(edited))
        await card.get_by_test_id("send-edit").click()
        tool = page.get_by_test_id("tool-card")
        await expect(tool).to_contain_text("x = 2")
        await tool.get_by_test_id("simulate").click()
        await settled(page)
        await expect(page.get_by_test_id("assistant").last).to_contain_text("Written.")
    row = await mesh.pool.fetchrow(
        "select state, arguments from orchestrator.tool_calls where session_id = 'web-edit'"
    )
    assert row["state"] == "completed" and row["arguments"] == edited
    audit = await mesh.pool.fetch(
        "select decision from hitl.audit_log where session_id = 'web-edit'"
    )
    assert [r["decision"] for r in audit] == ["edit"]


async def test_a_plan_approved_and_completed(mesh: Mesh, browser: Browser) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "create_plan", "arguments": PLAN}]},
        {"text": "Design written."},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "api.py"}}]},
        {"text": "Read it."},
    )
    async with playground(browser, mesh.gateway_url, "web-plan") as page:
        await send(page, "add logging", agent="coder")
        plan = page.get_by_test_id("plan-card")
        await expect(plan).to_contain_text("Add logging (2 steps, 10 min)")
        await expect(page.locator("#plan li.pending")).to_have_count(2)
        await plan.get_by_test_id("plan-approve").click()
        tool = page.get_by_test_id("tool-card")
        await expect(tool).to_contain_text("read_file")
        await tool.get_by_test_id("tool-result").fill('"def api(): ..."')
        await tool.get_by_test_id("send-result").click()
        await settled(page)
        await expect(page.locator("#plan li.done")).to_have_count(2)
        await expect(page.get_by_test_id("chain")).to_have_text("✓ architect → ✓ coder")
    tool_message = [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert tool_message["content"] == json.dumps("def api(): ...")


async def test_a_reload_resumes_the_session(mesh: Mesh, browser: Browser) -> None:
    words = " ".join(f"w{i}" for i in range(30))
    mesh.scripted.enqueue({"text": words, "chunk_size": 3, "token_delay_ms": 30})
    async with playground(browser, mesh.gateway_url, "web-reload") as page:
        await send(page, "talk", agent="coder")
        await expect(page.get_by_test_id("assistant")).to_contain_text("w1")
        await page.reload()
        await settled(page)
        texts = await page.get_by_test_id("assistant").all_inner_texts()
        assert [t.strip().split("\n")[-1] for t in texts] == [words]
        await expect(page.get_by_test_id("user")).to_have_text("talk")
        mesh.scripted.enqueue({"text": "Still here."})
        await send(page, "again", agent="coder")
        await expect(page.get_by_test_id("assistant").last).to_contain_text("Still here.")


async def test_a_session_opened_from_the_list_shows_its_history(
    mesh: Mesh, browser: Browser
) -> None:
    mesh.scripted.enqueue({"text": "First answer."})
    async with playground(browser, mesh.gateway_url, "web-one") as page:
        await send(page, "first question", agent="ask")
        await settled(page)
    async with playground(browser, mesh.gateway_url, "web-two") as page:
        await page.locator("#sessions [data-session=web-one]").click()
        await expect(page.get_by_test_id("session-id")).to_have_text("session web-one")
        await expect(page.get_by_test_id("user")).to_have_text("first question")
        await expect(page.get_by_test_id("assistant")).to_contain_text("First answer.")


async def test_with_api_keys_the_key_is_entered_once(database_url: str, browser: Browser) -> None:
    keys = {"k-web": "alice"}
    async with (
        running_mesh(database_url, gateway_api_keys=keys) as mesh,
        playground(browser, mesh.gateway_url, "web-key") as page,
    ):
        await expect(page.get_by_test_id("connection")).to_have_text("enter the API key")
        urls: list[str] = []
        page.on("websocket", lambda socket: urls.append(socket.url))
        await page.get_by_test_id("api-key").fill("k-web")
        await page.get_by_test_id("api-key").dispatch_event("change")
        await expect(page.get_by_test_id("connection")).to_have_text("connected")
        mesh.scripted.enqueue({"text": "Keyed."})
        await send(page, "hi", agent="ask")
        await settled(page)
        assert urls and not any("k-web" in url for url in urls)  # the key is not in a URL
        await page.reload()
        assert await page.get_by_test_id("api-key").input_value() == "k-web"
        await expect(page.get_by_test_id("assistant")).to_contain_text("Keyed.")


PATCH = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"


async def test_a_patch_review_card_keeps_or_rejects(mesh: Mesh, browser: Browser) -> None:
    review = {"tool_calls": [{"name": "apply_patch_review", "arguments": {"patch": PATCH}}]}
    mesh.scripted.enqueue(
        review,
        {"tool_calls": [{"name": "apply_patch", "arguments": {"patch": PATCH}}]},
        {"text": "Applied."},
        review,
        {"text": "Dropped."},
    )
    async with playground(browser, mesh.gateway_url, "web-review") as page:
        await send(page, "bump a", agent="coder")
        card = page.get_by_test_id("review-card")
        await expect(card.locator(".diff .del")).to_have_text("- a = 1")
        await expect(card.locator(".diff .add")).to_have_text("+ a = 2")
        await card.get_by_test_id("review-keep").click()
        tool = page.get_by_test_id("tool-card")  # the kept patch applies without a question
        await expect(tool).to_contain_text("apply_patch")
        await expect(page.get_by_test_id("approval-card")).to_have_count(0)
        await tool.get_by_test_id("simulate").click()
        await settled(page)
        await send(page, "bump a again", agent="coder")
        await card.get_by_test_id("review-feedback").fill("a stays 1")
        await card.get_by_test_id("review-reject").click()
        await expect(page.get_by_test_id("assistant").last).to_contain_text("Dropped.")
    audit = await mesh.pool.fetch(
        "select decision, event_type from hitl.audit_log"
        " where session_id = 'web-review' order by id"
    )
    assert [(r["decision"], r["event_type"]) for r in audit] == [
        ("approve", "patch_review"),
        ("reject", "patch_review"),
    ]
    told = [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "rejected the whole patch" in told["content"] and "a stays 1" in told["content"]


async def test_reasoning_shows_in_the_inspector_and_dimmed_in_the_chat(
    mesh: Mesh, browser: Browser
) -> None:
    thought = "The user greets me, so I greet back."
    mesh.scripted.enqueue({"reasoning": thought, "text": "Hello!", "token_delay_ms": 5})
    async with playground(browser, mesh.gateway_url, "web-think") as page:
        await send(page, "hi", agent="ask")
        await settled(page)
        await expect(page.get_by_test_id("reasoning")).to_have_text(thought)
        await expect(page.get_by_test_id("assistant")).to_contain_text("Hello!")
        kinds = await page.locator("#chat .msg").evaluate_all(
            "nodes => nodes.map(n => n.className)"
        )
        assert kinds.index("msg reasoning") < kinds.index("msg assistant")
        rows = page.locator(
            "#events tbody tr", has=page.locator("td:nth-child(2)", has_text="reasoning")
        )
        tokens = [json.loads(text)["token"] for text in await rows.locator("pre").all_inner_texts()]
        assert "".join(reversed(tokens)) == thought  # the inspector shows the newest first
