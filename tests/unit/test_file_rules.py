"""File restrictions: workspace confinement for everyone, write patterns for the architect."""

from __future__ import annotations

import unicodedata

import pytest

from services.orchestrator.turn.file_rules import (
    FILE_RESTRICTION_ERROR,
    PATH_ARGUMENTS,
    WRITE_TOOLS,
    PathCheck,
    check_paths,
)

MD_ONLY = [r"\.md$"]

ESCAPES = [
    "../etc/passwd",
    "a/../../x",
    "/etc/passwd",
    "C:\\Windows\\x",
    "c:relative",
    "\\\\server\\share\\x",
    "\\x",
    "~/x",
    "~root/x",
    "docs/x.md\x00.py",
    "docs/x.md\n",
    "docs/../../x.md",
    "..\\x.md",
    ".. /x",
    "",
]


def _refused(check: PathCheck) -> str:
    assert check.ok is False
    assert check.code == FILE_RESTRICTION_ERROR
    assert check.normalised == {}
    assert check.message is not None
    return check.message


# --- every agent ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize("tool", ["read_file", "write_file", "list_files", "create_directory"])
def test_paths_outside_the_workspace_are_refused_for_everyone(tool: str, path: str) -> None:
    message = _refused(check_paths(tool, {"path": path}, []))
    assert check_paths(tool, {"path": path}, []).path == path
    assert repr(path) in message


@pytest.mark.parametrize("tool", ["execute_command", "run_command"])
def test_command_working_directory_is_confined(tool: str) -> None:
    message = _refused(check_paths(tool, {"command": "ls", "cwd": "/tmp"}, []))
    assert "is absolute" in message
    ok = check_paths(tool, {"command": "ls", "cwd": "src/./app/"}, [])
    assert ok == PathCheck(True, None, None, None, {"command": "ls", "cwd": "src/app"})


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../x", "escapes the workspace with '..'"),
        ("/x", "is absolute"),
        ("D:\\x", "is absolute"),
        ("~/x", "starts with '~'"),
        ("a\x00b", "contains a control character"),
        ("a/.../b", "has a segment made only of dots and spaces"),
        ("", "is empty (use '.' for the workspace root)"),
    ],
)
def test_refusals_tell_the_model_why(path: str, reason: str) -> None:
    message = _refused(check_paths("read_file", {"path": path}, []))
    assert message.startswith(f"Path {path!r} for read_file {reason}")


@pytest.mark.parametrize("value", [None, 3, ["a.md"], {"p": "a.md"}])
def test_a_non_string_path_is_refused(value: object) -> None:
    check = check_paths("read_file", {"path": value}, [])
    assert _refused(check) == "Argument 'path' of read_file must be a string path"
    assert check.path is None


def test_paths_are_normalised_in_the_arguments() -> None:
    check = check_paths("write_file", {"path": "src\\.\\pkg//mod.py", "content": "x"}, [])
    assert check == PathCheck(True, None, None, None, {"path": "src/pkg/mod.py", "content": "x"})
    assert check_paths("list_files", {"path": "./"}, []).normalised == {"path": "."}


def test_a_missing_optional_path_is_fine() -> None:
    assert check_paths("list_files", {"recursive": True}, []) == PathCheck(
        True, None, None, None, {"recursive": True}
    )
    assert check_paths("git.diff", {}, MD_ONLY).ok


def test_tools_without_paths_pass_unchanged() -> None:
    arguments = {"query": "def main", "file_pattern": "/../*.py"}  # a glob, not a path
    assert check_paths("search_in_code", arguments, MD_ONLY).normalised == arguments
    assert check_paths("echo", {"text": "/etc/passwd"}, []).ok


def test_path_arguments_table() -> None:
    assert PATH_ARGUMENTS["execute_command"] == ("cwd",)
    assert PATH_ARGUMENTS["search_in_code"] == ("path",)
    assert {"write_file", "apply_patch", "apply_patch_review", "create_directory"} == WRITE_TOOLS


# --- write patterns (the architect) ---------------------------------------------------------


def test_architect_may_write_markdown() -> None:
    check = check_paths("write_file", {"path": "docs/design.md", "content": "#"}, MD_ONLY)
    assert check.ok and check.normalised["path"] == "docs/design.md"


def test_architect_may_not_write_code() -> None:
    check = check_paths(
        "write_file", {"path": "src/main.py", "content": ""}, MD_ONLY, agent_name="architect"
    )
    assert _refused(check) == r"architect may only write files matching \.md$, not src/main.py"
    assert check.path == "src/main.py"


@pytest.mark.parametrize(
    "path",
    [
        "notes.md/../main.py",  # matches before normalisation, not after
        "docs/x.md\x00.py",
        "docs/x.md\n",  # `$` would match before the newline
        "README.MD",  # patterns are case-sensitive
        "src/main.py:x.md",  # an NTFS stream of main.py
        "x.md.py",
        "docs/../../x.md",
    ],
)
def test_write_pattern_bypasses_are_refused(path: str) -> None:
    _refused(check_paths("write_file", {"path": path, "content": ""}, MD_ONLY))


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("docs/../src/main.py", False),  # the raw text starts with docs/, the file does not
        ("./docs/x.py", True),
        ("docs\\x.py", True),
        ("src/../docs/x.py", True),
    ],
)
def test_patterns_see_the_normalised_path(path: str, allowed: bool) -> None:
    check = check_paths("write_file", {"path": path, "content": ""}, [r"^docs/"])
    assert check.ok is allowed


def test_case_insensitive_patterns_are_opt_in() -> None:
    assert check_paths("write_file", {"path": "README.MD", "content": ""}, [r"(?i)\.md$"]).ok


def test_patterns_bind_writes_only() -> None:
    assert check_paths("read_file", {"path": "src/main.py"}, MD_ONLY).ok
    refused = check_paths("create_directory", {"path": "src"}, MD_ONLY)
    assert "not src" in _refused(refused)


def test_any_pattern_may_match() -> None:
    patterns = [r"\.md$", r"^docs/"]
    assert check_paths("write_file", {"path": "docs/a.txt", "content": ""}, patterns).ok
    message = _refused(check_paths("write_file", {"path": "a.txt", "content": ""}, patterns))
    assert r"matching \.md$ or ^docs/, not a.txt" in message


# --- patches --------------------------------------------------------------------------------


def _patch(old: str, new: str) -> str:
    return f"--- {old}\n+++ {new}\n@@ -1 +1 @@\n-a\n+b\n"


def test_patch_touching_markdown_is_allowed_for_the_architect() -> None:
    patch = "diff --git a/docs/x.md b/docs/x.md\n" + _patch("a/docs/x.md", "b/docs/x.md")
    check = check_paths("apply_patch", {"patch": patch}, MD_ONLY)
    assert check.ok and check.normalised == {"patch": patch}
    new_file = _patch("/dev/null", "b/docs/new file.md\t2024-01-01 00:00:00")
    assert check_paths("apply_patch_review", {"patch": new_file}, MD_ONLY).ok


@pytest.mark.parametrize(
    "patch",
    [
        _patch("a/src/main.py", "b/src/main.py"),
        _patch("a/docs/x.md", "b/src/main.py"),
        _patch("/dev/null", "b/notes.md/../main.py"),
        "diff --git a/x.md b/x.md\nrename from x.md\nrename to main.py\n",
        "diff --git a/x.py b/x.py\nGIT binary patch\nliteral 0\n",
        "diff --git a/a b/c b/d\n",  # ambiguous header: which files?
        _patch('"a/x.md"', '"b/main.py"'),
        _patch("docs/x.md", "src/main.py"),  # -p0 style names
    ],
)
def test_patches_writing_other_files_are_refused_for_the_architect(patch: str) -> None:
    _refused(check_paths("apply_patch", {"patch": patch}, MD_ONLY))


@pytest.mark.parametrize(
    "name",
    ["b/../../etc/passwd", "/etc/passwd", "b/C:\\x", "b//etc/passwd", "x/../../y", "b/~/x"],
)
def test_patches_may_not_leave_the_workspace(name: str) -> None:
    message = _refused(check_paths("apply_patch", {"patch": _patch("/dev/null", name)}, []))
    assert f"Path {name!r} in the patch for apply_patch" in message


def test_hunk_lines_that_look_like_headers_are_content() -> None:
    # Removing "-- note" and adding "++ tip" in a Markdown hunk touches no other file.
    hunk = "@@ -1,2 +1,2 @@\n--- note\n same\n+++ tip\n"
    patch = "--- a/x.md\n+++ b/x.md\n" + hunk
    assert check_paths("apply_patch", {"patch": patch}, MD_ONLY).ok
    # The same lines outside a hunk are headers naming files "note" and "tip".
    headers_only = hunk.split("\n", 1)[1]
    assert "not note" in _refused(check_paths("apply_patch", {"patch": headers_only}, MD_ONLY))


def test_a_header_pair_smuggled_into_a_hunk_is_still_checked() -> None:
    hunk = "@@ -1,9 +1,9 @@\n a\n"
    smuggled = "--- a/x.md\n+++ b/x.md\n" + hunk + "--- a/main.py\n+++ b/main.py\n"
    assert "not main.py" in _refused(check_paths("apply_patch", {"patch": smuggled}, MD_ONLY))


def test_unprefixed_patch_names_are_checked_as_p0_and_p1() -> None:
    # `patch -p1` would write docs/evil.py as evil.py, outside docs/.
    patch = _patch("docs/evil.py", "docs/evil.py")
    assert "not evil.py" in _refused(check_paths("apply_patch", {"patch": patch}, [r"^docs/"]))
    prefixed = _patch("a/docs/evil.py", "b/docs/evil.py")
    assert check_paths("apply_patch", {"patch": prefixed}, [r"^docs/"]).ok


def test_unrestricted_patches_pass_and_unreadable_headers_are_left_to_the_ide() -> None:
    assert check_paths("apply_patch", {"patch": _patch("a/src/main.py", "b/src/main.py")}, []).ok
    assert check_paths("apply_patch", {"patch": "diff --git a/a b/c b/d\n"}, []).ok


def test_quoted_names_are_unquoted() -> None:
    patch = _patch('"a/caf\\303\\251.md"', '"b/caf\\303\\251.md"')
    assert check_paths("apply_patch", {"patch": patch}, MD_ONLY).ok
    message = _refused(check_paths("apply_patch", {"patch": _patch("/dev/null", '"b/x\\0"')}, []))
    assert "contains a control character" in message


def test_a_non_string_patch_is_refused() -> None:
    assert _refused(check_paths("apply_patch", {"patch": 7}, [])) == (
        "The patch for apply_patch must be a string"
    )


# --- paths an IDE might decode ----------------------------------------------------------------

DECODED = [
    ("file:///etc/passwd", "URI scheme"),
    ("file:/etc/passwd", "URI scheme"),
    ("vscode-remote://host/etc/passwd", "URI scheme"),
    ("%2e%2e/x", "percent-encoded '.'"),
    ("%2E%2E%2Fetc%2Fpasswd", "percent-encoded"),
    ("docs%2f..%2f..%2fx.md", "percent-encoded '/'"),
    ("docs%5c..%5cx.md", "percent-encoded '\\\\'"),
    ("%252e%252e/x", "percent-encoded '%'"),
    ("a%00.md", "percent-encoded '\\x00'"),
    ("\u2024\u2024/x", "U+2024"),
    ("docs/\u2024\u2024/\u2024\u2024/x.md", "U+2024"),
    ("\uff0e\uff0e/x", "U+FF0E"),
    ("\u2025/x", "U+2025"),
    ("a\uff0fb.md", "U+FF0F"),
    ("notes\u202egpj.md", "U+202E"),
    ("read\u200bme.md", "U+200B"),
    ("\ufeffx.md", "U+FEFF"),
    ("x\uff1a.md", "U+FF1A"),
]


@pytest.mark.parametrize(("path", "fragment"), DECODED)
@pytest.mark.parametrize("tool", ["read_file", "write_file", "list_files", "create_directory"])
def test_paths_that_change_meaning_when_decoded_are_refused(
    tool: str, path: str, fragment: str
) -> None:
    check = check_paths(tool, {"path": path}, [])
    message = _refused(check)
    assert fragment in message and repr(path) in message
    assert check.path == path


@pytest.mark.parametrize(("path", "fragment"), DECODED)
def test_patches_naming_decodable_paths_are_refused(path: str, fragment: str) -> None:
    assert fragment in _refused(check_paths("apply_patch", {"patch": _patch(path, path)}, []))


def test_nfkc_changes_that_keep_the_segments_pass() -> None:
    decomposed = "docs/cafe\u0301/\uff76\uff80.md"  # macOS NFD accents, halfwidth katakana
    assert unicodedata.normalize("NFKC", decomposed) != decomposed
    assert check_paths("write_file", {"path": decomposed}, MD_ONLY).ok
    # ...while a lookalike that folds into '..' is refused whatever its neighbours.
    assert not check_paths("read_file", {"path": "cafe\u0301/\uff0e\uff0e/x"}, []).ok


@pytest.mark.parametrize(
    "path",
    ["100%.md", "50%off/notes.md", "café/naïve.md", "docs/\u00e9t\u00e9.md", "a.b.c/d-e_f.md"],
)
def test_ordinary_names_with_percent_and_accents_pass(path: str) -> None:
    assert check_paths("write_file", {"path": path}, MD_ONLY).ok


@pytest.mark.parametrize("path", ["x.md/", "docs/x.md/", "x.md\\", "x.md/."])
@pytest.mark.parametrize("tool", ["write_file", "apply_patch"])
def test_a_directory_named_like_markdown_is_not_a_markdown_file(tool: str, path: str) -> None:
    arguments = {"path": path} if tool == "write_file" else {"patch": _patch(path, path)}
    message = _refused(check_paths(tool, arguments, MD_ONLY, agent_name="architect"))
    assert "names a directory" in message


def test_a_directory_may_still_be_created_with_a_trailing_separator() -> None:
    assert check_paths("create_directory", {"path": "docs/adr/"}, []).normalised == {
        "path": "docs/adr"
    }
