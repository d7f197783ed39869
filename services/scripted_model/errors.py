"""The scripted model's refusals: each becomes OpenAI's 400 ``invalid_request_error``."""

from __future__ import annotations


class RequestRefused(ValueError):
    """A request the upstream answers with 400 ``invalid_request_error``."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class ScenarioError(ValueError):
    """A scenario description is malformed; the control endpoint answers 400."""


class EmbeddingInputError(ValueError):
    """The `input` of an embeddings request has an unsupported shape."""
