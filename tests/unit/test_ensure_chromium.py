"""``make test``'s Chromium step: nothing to do when a Chromium is there (or named by
``CHROMIUM``); without one and without apt-get it says what to install instead of failing
the whole run (the browser tests then fail with the same advice)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure_chromium.sh"
BASH = shutil.which("bash") or "/bin/bash"


def run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(SCRIPT)], env={"PATH": str(tmp_path), **env}, capture_output=True, text=True
    )


def test_a_named_or_found_chromium_needs_nothing(tmp_path: Path) -> None:
    named = run(tmp_path, {"CHROMIUM": "/opt/chromium/chrome"})
    assert (named.returncode, named.stdout, named.stderr) == (0, "", "")
    found = tmp_path / "chromium"
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755)
    on_path = run(tmp_path, {})
    assert (on_path.returncode, on_path.stdout, on_path.stderr) == (0, "", "")


def test_without_chromium_or_apt_it_says_what_to_install(tmp_path: Path) -> None:
    result = run(tmp_path, {})  # PATH holds neither chromium nor apt-get
    assert result.returncode == 0
    assert "install your distribution's chromium package" in result.stderr
    assert "CHROMIUM" in result.stderr
