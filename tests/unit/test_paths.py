"""Workspace paths (services/common/paths.py): what hitl and the file rules both rely on."""

from __future__ import annotations

import pytest

from services.common.paths import is_absolute, workspace_relative


@pytest.mark.parametrize(
    ("path", "absolute"),
    [("/etc", True), ("C:\\Windows", True), ("c:x", True), ("src/a.py", False), ("~/x", False)],
)
def test_absolute_means_a_root_or_a_drive(path: str, absolute: bool) -> None:
    assert is_absolute(path) is absolute


@pytest.mark.parametrize(
    ("path", "root", "expected"),
    [
        ("src/../lib", ".", "lib"),
        ("/home/me/project/src", "/home/me/project", "src"),
        ("/home/me/project", "/home/me/project/", "."),
        ("/home/me/other/src", "/home/me/project", None),
        ("/home/me/project-old/x", "/home/me/project", None),  # a prefix is not a parent
        ("C:\\Work\\App\\src", "c:/work/app", "src"),  # drive letters ignore case
        ("/etc/passwd", ".", None),  # an absolute path under a relative root
        ("/home/me/project/\x00", "/home/me/project", None),
    ],
)
def test_a_path_relative_to_the_workspace(path: str, root: str, expected: str | None) -> None:
    assert workspace_relative(path, root) == expected
