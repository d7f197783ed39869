"""The ``codelab`` process itself: ``-p --json`` for scripts, Ctrl-C, ``sessions``, bad input."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tomllib
from pathlib import Path

from clients.cli.__main__ import main
from tests.faces.cli_support import CLI, ROOT, cli_env, run_codelab
from tests.support.mesh import Mesh, running_mesh


async def test_json_mode_runs_the_tools_and_exits_with_the_status(
    mesh: Mesh, tmp_path: Path
) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    (tmp_path / "lib").mkdir()
    code, events, _ = await run_codelab(
        "-p", "what files are in this project?", "--json", "--url", mesh.gateway_url, cwd=tmp_path
    )
    assert code == 0
    assert events[-1]["type"] == "done" and events[-1]["status"] == "completed"
    (call,) = [e for e in events if e["type"] == "tool_call"]
    assert call["tool_name"] == "list_files"
    tool = [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert json.loads(tool["content"]) == ["lib/", "main.py"]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))


async def test_json_mode_never_approves_what_hitl_flagged(mesh: Mesh, tmp_path: Path) -> None:
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "x.py", "content": "1"}}]},
        {"text": "Not written then."},
    )
    code, events, _ = await run_codelab(
        "-p", "write x", "--json", "--agent", "coder", "--url", mesh.gateway_url, cwd=tmp_path
    )
    assert code == 0 and events[-1]["status"] == "completed"
    assert not (tmp_path / "x.py").exists()
    tool = [m for m in mesh.scripted.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "nobody could approve" in tool["content"]


async def test_json_mode_rejects_a_patch_review_and_writes_nothing(
    mesh: Mesh, tmp_path: Path
) -> None:
    patch = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    (tmp_path / "app.py").write_text("a = 1\n")
    mesh.scripted.enqueue(
        {"tool_calls": [{"name": "apply_patch_review", "arguments": {"patch": patch}}]},
        {"tool_calls": [{"name": "apply_patch", "arguments": {"patch": patch}}]},
        {"text": "Left as it was."},
    )
    code, events, _ = await run_codelab(
        "-p", "bump a", "--json", "--agent", "coder", "--url", mesh.gateway_url, cwd=tmp_path
    )
    assert code == 0 and events[-1]["status"] == "completed"
    assert (tmp_path / "app.py").read_text() == "a = 1\n"
    review, apply = [e for e in events if e["type"] == "tool_call"]
    assert review["requires_approval"] is False and apply["requires_approval"] is True
    audit = await mesh.pool.fetch(
        "select decision, tool_name from hitl.audit_log where session_id = $1 order by id",
        events[-1]["session_id"],
    )
    assert [(r["decision"], r["tool_name"]) for r in audit] == [
        ("reject", "apply_patch_review"),
        ("reject", "apply_patch"),
    ]


async def test_ctrl_c_cancels_then_the_process_exits_130(mesh: Mesh, tmp_path: Path) -> None:
    mesh.scripted.enqueue({"text": "slow " * 200, "chunk_size": 5, "token_delay_ms": 50})
    process = await asyncio.create_subprocess_exec(
        *CLI, "-p", "talk", "--json", "--agent", "coder", "--url", mesh.gateway_url,
        cwd=tmp_path, env=cli_env(), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    async with asyncio.timeout(60):
        while '"token"' not in (await process.stdout.readline()).decode():
            pass
        process.send_signal(signal.SIGINT)
        rest = (await process.stdout.read()).decode().splitlines()
        code = await process.wait()
    assert code == 130
    assert json.loads(rest[-1])["status"] == "cancelled"


async def test_sessions_lists_the_callers_sessions(mesh: Mesh, tmp_path: Path) -> None:
    code, _, _ = await run_codelab(
        "-p", "hello", "--session", "cli-listed", "--url", mesh.gateway_url, cwd=tmp_path
    )
    assert code == 0
    code, rows, _ = await run_codelab("sessions", "--json", "--url", mesh.gateway_url, cwd=tmp_path)
    assert code == 0
    assert "cli-listed" in [row["session_id"] for row in rows]


async def test_an_unreachable_gateway_is_one_clear_line(tmp_path: Path) -> None:
    code, _, err = await run_codelab("-p", "hi", "--url", "http://127.0.0.1:9", cwd=tmp_path)
    assert code == 1
    assert err.startswith("codelab: SERVICE_UNAVAILABLE: cannot reach the gateway")
    assert "Traceback" not in err
    code, _, err = await run_codelab("sessions", cwd=tmp_path, CODELAB_URL="http://127.0.0.1:9")
    assert code == 1 and "Traceback" not in err


async def test_bad_flags_are_refused_by_the_parser(tmp_path: Path) -> None:
    code, _, err = await run_codelab("--json", cwd=tmp_path)
    assert code == 2 and "--json goes with -p" in err
    code, _, err = await run_codelab("-C", str(tmp_path / "nope"), "-p", "x", cwd=tmp_path)
    assert code == 2 and "not a directory" in err


def test_the_console_script_is_codelab() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["codelab"] == "clients.cli.__main__:main"
    assert callable(main) and sys.executable


async def test_with_gateway_api_keys_the_key_is_needed(database_url: str, tmp_path: Path) -> None:
    async with running_mesh(database_url, gateway_api_keys={"k-alice": "alice"}) as mesh:
        url = mesh.gateway_url
        code, events, _ = await run_codelab(
            "-p", "hi", "--json", "--url", url, cwd=tmp_path, CODELAB_API_KEY="k-alice"
        )
        assert code == 0 and events[-1]["status"] == "completed"
        code, _, err = await run_codelab("-p", "hi", "--url", url, cwd=tmp_path)
        # No key: the socket opens, the first message is refused and the CLI stops.
        assert code == 1 and "UNAUTHORIZED" in err
        wrong = ("--url", url, "--api-key", "k-wrong")
        code, _, err = await run_codelab("-p", "hi", *wrong, cwd=tmp_path)
        assert code == 1 and "the gateway refused the WebSocket (403)" in err
        code, _, err = await run_codelab("sessions", *wrong, cwd=tmp_path)
        assert code == 1 and "UNAUTHORIZED" in err
