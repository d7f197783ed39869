"""A small MCP server over stdio, written with the official SDK, for the tool-source tests.

Run as ``python tests/support/mcp_server.py``. Its tools: a weather forecast and a sum
(quick), ``slow`` (sleeps), ``fail`` (the tool's own error), ``big`` (a long output) and
``unlock``, which adds a tool at run time and tells listening clients the list changed,
and ``crash``, which ends the process.
"""

from __future__ import annotations

import asyncio
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("weather-desk")
FORECASTS = {"paris": "18 C, light rain", "tokyo": "24 C, clear sky"}


@server.tool()
def get_forecast(city: str) -> str:
    """Weather forecast for a city: temperature and sky for tomorrow."""
    return f"Forecast for {city}: {FORECASTS.get(city.lower(), '20 C, cloudy')}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def slow(seconds: float) -> str:
    """Wait for the given number of seconds, then answer."""
    await asyncio.sleep(seconds)
    return f"waited {seconds} s"


@server.tool()
def fail(reason: str) -> str:
    """A tool that always fails with the given reason."""
    raise ToolError(f"the desk refused: {reason}")


@server.tool()
def big(characters: int) -> str:
    """Return a text of the given length."""
    return "x" * characters


@server.tool()
def crash() -> str:
    """Stop this server's process at once (the client sees the connection drop)."""
    os._exit(3)


@server.tool()
async def unlock(name: str, ctx: Context) -> str:
    """Add a tool with the given name to this server."""

    def unlocked() -> str:
        return f"{name} is unlocked"

    server.add_tool(unlocked, name=name, description=f"The unlocked tool {name}")
    await ctx.notify_tools_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run()
