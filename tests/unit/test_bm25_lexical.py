"""The agent directory's lexical half (common/bm25, used by toolsearch and by the
orchestrator's fallback): BM25 with the catalog's tokenizer and the query terms behind
each score, which routing trusts."""

from __future__ import annotations

from services.common.bm25 import AGENT_STOPWORDS, STOPWORDS, lexical_matches, tokenize

ENTRIES = [
    ("translator", "translator\ntranslate, localisation\nYou are an agent that translates texts."),
    ("debug", "debug\nFinds the cause of errors and failing tests from stack traces."),
]


def test_each_entry_names_the_query_terms_it_contains() -> None:
    found = lexical_matches("Translate the error messages", ENTRIES)
    assert found["translator"].matched == ("translate",)
    assert found["debug"].matched == ("error",)  # plurals folded: "errors" is "error"
    assert found["translator"].score > 0 and found["debug"].score > 0


def test_a_word_in_every_agent_prompt_matches_nothing() -> None:
    assert "agent" in AGENT_STOPWORDS and "agent" not in STOPWORDS
    assert lexical_matches("which agent agents", ENTRIES) == {}
    assert "agent" in tokenize("which agent")  # the catalog keeps the word: tools name it


def test_an_entry_sharing_no_term_is_left_out() -> None:
    found = lexical_matches("stack trace of a crash", ENTRIES)
    assert set(found) == {"debug"} and found["debug"].matched == ("stack", "trace")
    assert lexical_matches("", ENTRIES) == {}
