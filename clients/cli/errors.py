"""What can go wrong on the IDE's side; each error carries the protocol's error code."""

from __future__ import annotations


class CliError(Exception):
    """Base of every codelab error; ``code`` is the spec's error code."""

    code = "TOOL_EXECUTION_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def as_result_error(self) -> str:
        """The ``error`` of a ``tool_result``: the code first, so the model can read it."""
        return f"{self.code}: {self.message}"


class ToolFailed(CliError):
    """A tool ran and failed (missing file, bad patch, not a git repository, ...)."""


class PathRefused(CliError):
    """A path leaves the workspace (``..``, absolute, ``~``, a symlink pointing out)."""

    code = "FILE_RESTRICTION_ERROR"


class ToolTimedOut(CliError):
    """A command ran past its timeout and was killed."""

    code = "TOOL_TIMEOUT"


class UnknownTool(CliError):
    """The runtime asked for a tool this IDE does not have."""

    code = "TOOL_VALIDATION_ERROR"


class NoPerson(CliError):
    """A tool needs a person's answer and nobody is at the terminal (``codelab -p``)."""

    code = "USER_INPUT_REQUIRED"


class GatewayError(CliError):
    """The gateway refused a request or cannot be reached."""

    code = "SERVICE_UNAVAILABLE"


class Interrupted(Exception):
    """Ctrl-C (or Ctrl-D) at one of codelab's questions: the turn is cancelled, not codelab.

    Not a CliError: it never becomes a tool's error, the driver cancels the turn instead.
    """
