"""Register an MCP server and an agent that finds its tools, then ask it a question.

With ``make run`` going (from the repository's root, in another terminal)::

    .venv/bin/python examples/tool_sources/demo.py

It registers ``weather.source.json`` (the stdio MCP server of tests/support) and the
``desk`` template (``tool_policy.mode: retrieval``), asks "What is the weather in Paris
tomorrow?" over the WebSocket, approves the tool call (the source rates it medium risk),
and prints the answer and the session's audit rows. With the built-in scripted model it
first queues the model's moves: search the catalog, call the tool it found, answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import websockets

HERE = Path(__file__).parent
SCRIPTED_TURNS = [
    {
        "tool_calls": [
            {"name": "tool_search", "arguments": {"query": "weather forecast for a city"}}
        ]
    },
    {"tool_calls": [{"name": "weather_get_forecast", "arguments": {"city": "Paris"}}]},
    {"text": "Tomorrow in Paris: 18 C and light rain (from weather.get_forecast)."},
]


def show(event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind == "assistant_message" and event.get("token"):
        print(event["token"], end="", flush=True)
    elif kind == "tool_call":
        asks = " (needs approval: " + event["reason"] + ")" if event["requires_approval"] else ""
        print(f"\n⚙ {event['tool_name']} {json.dumps(event['arguments'])}{asks}")
    elif kind in ("agent_switched", "error", "done"):
        print(f"\n[{kind}] " + json.dumps({k: v for k, v in event.items() if k != "type"}))


async def turn(ws: Any, message: dict[str, Any]) -> list[dict[str, Any]]:
    await ws.send(json.dumps(message))
    events = []
    while True:
        event = json.loads(await ws.recv())
        events.append(event)
        show(event)
        if event["type"] == "done":
            return events


async def main(gateway: str, scripted: str | None) -> None:
    admin = {"X-Internal-Auth": os.environ.get("INTERNAL_API_KEY", "")}
    async with httpx.AsyncClient(base_url=gateway, headers=admin, timeout=60) as http:
        source = json.loads((HERE / "weather.source.json").read_text())
        registered = (await http.post("/admin/tool-sources", json=source)).json()
        print("source:", registered.get("state"), registered.get("tools") or registered)
        template = json.loads((HERE / "desk.template.json").read_text())
        reply = await http.post("/admin/templates", json=template)
        print("template:", reply.status_code, reply.json().get("version"))
        if scripted:
            await http.post(f"{scripted}/_scripted/scenarios", json=SCRIPTED_TURNS)
        sid = "desk-" + uuid.uuid4().hex[:8]
        ws_url = gateway.replace("http", "ws", 1) + f"/ws/{sid}"
        async with websockets.connect(ws_url) as ws:
            question = "What is the weather in Paris tomorrow?"
            events = await turn(
                ws, {"type": "user_message", "content": question, "agent_type": "desk"}
            )
            while events[-1]["status"] == "awaiting_approval":
                call = [e for e in events if e["type"] == "tool_call"][-1]
                print(f"approving {call['tool_name']}")
                decision = {
                    "type": "hitl_decision",
                    "call_id": call["call_id"],
                    "decision": "approve",
                }
                events = await turn(ws, decision)
        audit = (await http.get("/events/audit-log", params={"session_id": sid})).json()
        for entry in reversed(audit["entries"]):
            print("audit:", entry["event_type"], entry["tool_name"], entry["decision"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway", default=os.environ.get("CODELAB_URL", "http://127.0.0.1:8000"))
    parser.add_argument(
        "--scripted",
        default=None if os.environ.get("OPENAI_BASE_URL") else "http://127.0.0.1:8090",
        help="the scripted model's URL (none with a real model)",
    )
    arguments = parser.parse_args()
    sys.exit(asyncio.run(main(arguments.gateway, arguments.scripted)))
