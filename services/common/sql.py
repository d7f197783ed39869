"""Named SQL blocks from a ``queries.sql`` file.

Blocks start with ``-- name: <name>`` and run until the next one; parameters are
asyncpg's ``$n``. Keeping SQL in .sql files lets it be read and tested as SQL.
"""

from __future__ import annotations

import re
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(path: Path) -> dict[str, str]:
    """Parse a queries file into {name: sql}; duplicate names are an error."""
    text = path.read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{path}: query {name!r} defined twice")
        queries[name] = body.strip()
    return queries
