"""/v1 checks a request's model against the last listing of the templates."""

from __future__ import annotations

import time

import pytest

from services.gateway.openai_api import TemplateNames


def test_nothing_is_known_before_a_listing() -> None:
    assert not TemplateNames().has("coder")


def test_a_listed_name_is_known_while_the_listing_is_fresh() -> None:
    names = TemplateNames(ttl=60)
    assert names.update(["coder", "ask"]) == ["coder", "ask"]
    assert names.has("coder") and names.has("ask") and not names.has("gpt-4o")


def test_a_stale_listing_answers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    names = TemplateNames(ttl=5)
    names.update(["coder"])
    later = time.monotonic() + 6
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert not names.has("coder")  # the caller lists again


def test_a_new_listing_replaces_the_old_one() -> None:
    names = TemplateNames(ttl=60)
    names.update(["coder", "ask"])
    names.update(["coder"])
    assert names.has("coder") and not names.has("ask")
