"""JSON-lines logging with the session and call in scope.

``log_context(session_id=..., call_id=...)`` binds ids in a contextvar so every
line logged inside a turn carries them without threading them through calls; with
tracing on, a line logged inside a span carries its ``trace_id`` and ``span_id``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType

from services.common.tracing import current_ids

_context: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "codelab_log_context", default=MappingProxyType({})
)


@contextlib.contextmanager
def log_context(**ids: str | None) -> Iterator[None]:
    """Add ids (session_id, call_id, ...) to every log line inside the block."""
    previous = _context.get()
    token = _context.set({**previous, **{k: v for k, v in ids.items() if v}})
    try:
        yield
    finally:
        try:
            _context.reset(token)
        except ValueError:
            # An async generator resumed by another task exits in another context:
            # restore the value there instead.
            _context.set(previous)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, service, logger, msg, ids, extras."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
            **_context.get(),
        }
        ids = current_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(service: str, level: str = "INFO") -> None:
    """Route the root logger to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "uvicorn.access", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
