"""Which timeout a tool call gets: TOOL_TIMEOUT, else the catalog's, else the default."""

from __future__ import annotations

from typing import Any, cast

import pytest

from services.common.db import Pool
from services.orchestrator.session.tool_timeouts import DEFAULT_SECONDS, ToolTimeouts
from services.orchestrator.turn.toolbox import ToolSpec
from services.toolsearch.catalog import builtin_drafts, make_draft
from services.toolsearch.errors import InvalidTool

CATALOG = {
    "read_file": ToolSpec("read_file", "", {}, "ide", 120),
    "echo": ToolSpec("echo", "", {}, "local"),
}


async def no_catalog() -> dict[str, ToolSpec]:
    return {}


def timeouts(override: float = 0.0) -> ToolTimeouts:
    return ToolTimeouts(cast(Pool, None), no_catalog, override)


def test_the_catalog_sets_each_tool_and_the_default_fills_in() -> None:
    assert timeouts().seconds(CATALOG, "read_file") == 120
    assert timeouts().seconds(CATALOG, "echo") == DEFAULT_SECONDS
    assert timeouts().seconds(CATALOG, "unknown") == DEFAULT_SECONDS


def test_tool_timeout_overrides_every_tool() -> None:
    assert timeouts(7).seconds(CATALOG, "read_file") == 7
    assert timeouts(7).seconds(CATALOG, "echo") == 7


def test_every_builtin_ide_tool_has_a_timeout() -> None:
    ide_tools = [d for d in builtin_drafts() if d.executor == "ide"]
    assert ide_tools and all(d.timeout_seconds > 0 for d in ide_tools)


@pytest.mark.parametrize("bad", [-1, 86_401, "soon", 1.5, True])
def test_a_bad_catalog_timeout_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidTool, match="timeout_seconds"):
        make_draft({"name": "t", "description": "d", "timeout_seconds": bad})
