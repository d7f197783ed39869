"""The committed stubs must equal what `make proto` generates from protos/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_stubs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "protogen.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
