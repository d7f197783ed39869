"""toolsearch's failures, each with the spec's error code."""

from __future__ import annotations

from services.common.errors import InvalidInput, Unavailable


class InvalidTool(InvalidInput):
    """A tool definition sent to UpsertTools is malformed."""

    code = "TOOL_VALIDATION_ERROR"


class InvalidSearch(InvalidInput):
    """A search request is malformed (empty query, bad limits, contradictory filters)."""

    code = "MISSING_REQUIRED_FIELD"


class EmbeddingUnavailable(Unavailable):
    """The embedding model could not be loaded or did not answer as expected."""

    code = "SERVICE_UNAVAILABLE"
