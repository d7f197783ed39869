"""search_in_code with ripgrep (the ``ripgrep`` wheel of the dev extras) and without: the same
answers on a small tree, hidden, skipped, binary and symlinked files included."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from clients.cli import search
from clients.cli.errors import PathRefused
from clients.cli.person import Nobody
from clients.cli.tools import Toolbox
from clients.cli.workspace import Workspace
from tests.faces.cli_support import ROOT

RG = search.find_ripgrep()


@pytest.fixture
def tree(tmp_path: Path) -> Workspace:
    root = tmp_path / "project"
    outside = tmp_path / "outside"
    (root / "src" / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.py").write_text("return 'secret'\n")
    (root / "src" / "app.py").write_text("def main():\n\n    return 1\n")
    (root / "src" / "sub" / "deep.py").write_text("return 2  # deep\n")
    (root / "src" / "a_first.py").write_text("x = 'return'\n")
    (root / "README.md").write_text("# demo: return values\n")
    (root / ".env").write_text("HIDDEN=return 3\n")
    (root / ".git").write_text("gitdir: ../return/.git\n")  # a worktree's pointer file
    (root / "node_modules").mkdir()
    (root / "node_modules" / "dep.js").write_text("return 4\n")
    (root / "crlf.txt").write_bytes(b"return 5\r\nnext\r\n")
    (root / "blob.bin").write_bytes(b"return\x00binary\n")
    (root / "latin1.txt").write_bytes(b"return caf\xe9\n")
    (root / "out.py").symlink_to(outside / "secret.py")
    (root / "outdir").symlink_to(outside)
    (root / "again.py").symlink_to(root / "src" / "app.py")
    return Workspace(root)


def test_the_dev_extras_install_ripgrep() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "ripgrep==14.1.0" in project["project"]["optional-dependencies"]["dev"]
    assert RG is not None and Path(RG).name == "rg"


@pytest.mark.parametrize(
    ("query", "base", "pattern", "limit"),
    [
        ("return", ".", None, 200),
        (r"return \d", ".", None, 200),
        ("return", ".", None, 3),
        ("return", ".", "*.py", 200),
        ("return", ".", "src/*.py", 200),
        ("return", "src", None, 200),
        ("return", "src/app.py", None, 200),
        ("^$", ".", None, 200),
        ("return 5$", ".", None, 200),
        ("next", ".", None, 200),
        ("RETURN", ".", None, 200),
        ("values(", ".", None, 200),
    ],
)
async def test_ripgrep_and_python_give_the_same_answer(
    tree: Workspace,
    query: str,
    base: str,
    pattern: str | None,
    limit: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert RG is not None
    folder = tree.resolve(base)
    expected = search.python_search(tree, query, folder, pattern, limit)

    def no_fallback(*args: object) -> None:
        raise AssertionError("ripgrep fell back to Python")

    monkeypatch.setattr(search, "python_search", no_fallback)
    assert await search.ripgrep_search(RG, tree, query, folder, pattern, limit) == expected


async def test_what_both_paths_find_and_skip(tree: Workspace) -> None:
    found = search.python_search(tree, "return", tree.root, None, 200)
    assert [m["path"] for m in found] == [
        ".env",
        ".git",  # a file: only .git folders are skipped
        "README.md",
        "crlf.txt",
        "src/a_first.py",
        "src/app.py",
        "src/sub/deep.py",
    ]
    assert found[3] == {"path": "crlf.txt", "line": 1, "text": "return 5"}
    assert found[5] == {"path": "src/app.py", "line": 3, "text": "    return 1"}
    assert search.project_files(tree, "py", 10) == [
        "src/a_first.py",
        "src/app.py",
        "src/sub/deep.py",
    ]


async def test_a_query_ripgrep_cannot_parse_is_answered_by_python(tree: Workspace) -> None:
    assert RG is not None
    lookahead = r"return(?= \d)"  # Python's re has look-ahead, ripgrep's engine does not
    answer = await search.ripgrep_search(RG, tree, lookahead, tree.root, None, 200)
    assert answer == search.python_search(tree, lookahead, tree.root, None, 200)
    assert [m["path"] for m in answer] == [".env", "crlf.txt", "src/app.py", "src/sub/deep.py"]


async def test_the_toolbox_with_ripgrep_stays_in_the_workspace(tree: Workspace) -> None:
    box = Toolbox(tree, Nobody(), ripgrep=RG)
    without = Toolbox(tree, Nobody(), ripgrep=None)
    for tool in ("search_in_code", "search_in_project"):
        assert await box.run(tool, {"query": "secret"}) == await without.run(
            tool, {"query": "secret"}
        )
    assert await box.run("search_in_code", {"query": "secret"}) == []
    for path in ("../outside", "outdir", "out.py"):
        with pytest.raises(PathRefused):
            await box.run("search_in_code", {"query": "return", "path": path})
