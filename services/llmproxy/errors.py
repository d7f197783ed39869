"""llmproxy's failures, each with the spec's error code."""

from __future__ import annotations

from services.common.errors import ErrorKind, ServiceError


class LlmError(ServiceError):
    """The upstream model failed (after retries where retrying made sense)."""

    code = "LLM_ERROR"
    kind = ErrorKind.INTERNAL


class LlmTimeout(LlmError):
    """The upstream did not answer within the per-call timeout."""

    code = "LLM_TIMEOUT"
    kind = ErrorKind.TIMEOUT


class LlmUnavailable(LlmError):
    """The upstream cannot be reached or keeps refusing (429/5xx after retries)."""

    code = "LLM_PROXY_UNAVAILABLE"
    kind = ErrorKind.UNAVAILABLE


class LlmStreamInterrupted(LlmError):
    """The stream broke after tokens had already been sent."""

    code = "LLM_STREAM_INTERRUPTED"
    kind = ErrorKind.ABORTED


class LlmContextExceeded(LlmError):
    """The prompt does not fit the model's context window (the caller may shorten it)."""

    code = "LLM_CONTEXT_LENGTH_EXCEEDED"
    kind = ErrorKind.INVALID


class UpstreamStatus(Exception):
    """The upstream answered with a status other than 2xx (classified into an LlmError)."""

    def __init__(
        self, status: int, message: str, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(f"upstream answered {status}: {message}")
        self.status = status
        self.message = message
        self.code = code
        """The error body's ``error.code`` (e.g. ``context_length_exceeded``)."""
        self.retry_after = retry_after
        """Seconds the upstream asked to wait (``Retry-After``), when it said."""
