"""Reading an SSE response body in tests."""

from __future__ import annotations


def parse_sse(text: str) -> list[tuple[str, str]]:
    """(event, data) pairs and ('comment', ...) for heartbeats."""
    frames: list[tuple[str, str]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        if block.startswith(":"):
            frames.append(("comment", block))
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        frames.append((fields.get("event", "message"), fields["data"]))
    return frames
