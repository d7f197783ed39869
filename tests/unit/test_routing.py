"""Routing: the classification prompt, reading the model's verdict, the keyword fallback."""

from __future__ import annotations

import pytest

from services.orchestrator.agents.routing import (
    SPECIALISTS,
    Classification,
    Confidence,
    classification_prompt,
    keyword_classification,
    parse_classification,
)

# --- the prompt -----------------------------------------------------------------------------


def test_prompt_lists_the_agents_and_asks_for_json() -> None:
    prompt = classification_prompt("Создай функцию сортировки")
    for line in [
        "- coder: For writing, modifying, or refactoring code",
        "- architect: For planning, designing, or creating technical specifications",
        "- debug: For troubleshooting, investigating errors, or analyzing logs",
        "- ask: For answering questions or explaining concepts",
        "User request: Создай функцию сортировки",
    ]:
        assert f"\n{line}\n" in prompt
    assert prompt.startswith("Analyze the following user request and determine which")
    assert prompt.endswith(
        'Respond with JSON: {"agent": "agent_name", "confidence": "high|medium|low", '
        '"reason": "explanation"}'
    )
    assert SPECIALISTS == ("coder", "architect", "debug", "ask")


# --- parsing the model's answer -------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"agent": "debug", "confidence": "high", "reason": "a NameError"}',
        '```json\n{"agent": "debug", "confidence": "high", "reason": "a NameError"}\n```',
        'Sure! {"agent": " Debug ", "confidence": "HIGH", "reason": "a NameError"} Hope so.',
        'I think {not json} but {"agent": "debug", "confidence": "high", "reason": "a NameError"}',
    ],
)
def test_strict_json_in_any_wrapping(text: str) -> None:
    assert parse_classification(text, SPECIALISTS) == Classification(
        "debug", "high", "a NameError", "llm"
    )


@pytest.mark.parametrize(
    ("confidence", "expected"),
    [('"low"', "low"), ('" Low "', "low"), ('"certain"', "medium"), ("null", "medium")],
)
def test_confidence_defaults_to_medium(confidence: str, expected: Confidence) -> None:
    parsed = parse_classification(f'{{"agent": "ask", "confidence": {confidence}}}', SPECIALISTS)
    assert parsed == Classification("ask", expected, "", "llm")


def test_agent_suffix_is_tolerated() -> None:
    parsed = parse_classification('{"agent": "Coder Agent", "reason": 3}', SPECIALISTS)
    assert parsed == Classification("coder", "medium", "", "llm")


@pytest.mark.parametrize(
    "text",
    [
        '{"agent": "universal", "confidence": "high"}',  # not a specialist
        '{"agent": "planner", "reason": "the architect could do it"}',  # no guessing from prose
        '{"agent": 3}',
    ],
)
def test_a_wellformed_answer_with_an_unknown_agent_is_rejected(text: str) -> None:
    assert parse_classification(text, SPECIALISTS) is None


def test_allowed_set_is_respected() -> None:
    assert parse_classification('{"agent": "debug"}', ["coder", "ask"]) is None
    parsed = parse_classification('{"agent": "debug"}', ["Debug"])
    assert parsed is not None and parsed.agent == "debug"


def test_truncated_json_is_salvaged_by_regex() -> None:
    text = '{"agent": "architect", "confidence": "low", "reason": "needs a desi'
    assert parse_classification(text, SPECIALISTS) == Classification(
        "architect", "low", "salvaged from a malformed answer", "salvaged"
    )


def test_salvage_by_a_single_bare_agent_name() -> None:
    parsed = parse_classification("This is clearly a task for the Debug agent.", SPECIALISTS)
    assert parsed == Classification("debug", "low", "agent named in a free-text answer", "salvaged")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I cannot help with that.",
        "Either the coder or the debug agent.",  # two names: no guess
        "debugging is fun; the coders agree",  # whole words only
        '{"agent": "wizard"',
        "[1, 2, 3]",
    ],
)
def test_nonsense_is_none(text: str) -> None:
    assert parse_classification(text, SPECIALISTS) is None


# --- keyword fallback -----------------------------------------------------------------------

ENGLISH = [
    ("Write a function that sorts a list", "coder"),
    ("Create a REST endpoint for user login", "coder"),
    ("Refactor the payment module", "coder"),
    ("Add input validation to the signup form", "coder"),
    ("Fix the bug in login", "coder"),
    ("Rename the helper and update its callers", "coder"),
    ("Design the architecture for a chat service", "architect"),
    ("Plan the migration from MySQL to PostgreSQL", "architect"),
    ("Draw a sequence diagram of the auth flow", "architect"),
    ("Document the design decisions for the cache layer", "architect"),
    ("I get a TypeError when I run the app", "debug"),
    ("The server crashes on startup, investigate", "debug"),
    ("Why does the test fail?", "debug"),
    ("Here is the traceback from the worker", "debug"),
    ("The page is not working after the deploy", "debug"),
    ("Explain what this code does", "ask"),
    ("How does the authenticate function work?", "ask"),
    ("What is dependency injection?", "ask"),
    ("Tell me the difference between lists and tuples", "ask"),
    ("Which files handle routing?", "ask"),
]
RUSSIAN = [
    ("Создай функцию сортировки", "coder"),
    ("Создайте модуль оплаты", "coder"),
    ("Напиши класс для работы с базой данных", "coder"),
    ("Реализуй авторизацию через OAuth", "coder"),
    ("Добавь зависимость requests", "coder"),  # зависимость is not зависает
    ("Исправь ошибку в функции login", "coder"),
    ("Обнови зависимости", "coder"),
    ("Спроектируй архитектуру микросервиса", "architect"),
    ("Какая архитектура нужна для чата", "architect"),
    ("Составь план миграции базы данных", "architect"),
    ("Нарисуй диаграмму последовательности для авторизации", "architect"),
    ("Опиши структуру проекта в документации", "architect"),
    ("У меня ошибка NameError", "debug"),
    ("Почему падает тест?", "debug"),
    ("Приложение вылетает при запуске", "debug"),
    ("Сервис не работает, посмотри логи", "debug"),
    ("Программа зависла после обновления", "debug"),  # обновление is no request to update
    ("Откуда берутся эти ошибки", "debug"),
    ("Как работает функция authenticate?", "ask"),
    ("Объясни, что делает этот код", "ask"),
    ("Что такое замыкание в Python?", "ask"),
    ("Чем отличается список от кортежа?", "ask"),
    ("Зачем нужен этот декоратор?", "ask"),
]


@pytest.mark.parametrize(("message", "agent"), ENGLISH + RUSSIAN)
def test_keyword_routing(message: str, agent: str) -> None:
    routed = keyword_classification(message)
    assert (routed.agent, routed.method) == (agent, "keywords")
    assert routed.reason.startswith("keywords: ")


def test_no_keywords_falls_back_to_coder_with_low_confidence() -> None:
    for message in ["Hello there", "Привет", "Is it ok?", ""]:
        assert keyword_classification(message) == Classification(
            "coder", "low", "no routing keywords; default agent", "keywords"
        )


@pytest.mark.parametrize(
    "message",
    [
        "Check the email address",  # not "add"
        "Look at the planet",  # not "plan"
        "Decode the barcode",  # not "code"
        "Нам нужен планшет",  # not "план"
        "Логика входа",  # not "лог"
        "Я хочу, чтобы всё было быстро",  # "чтобы" is not "что"
    ],
)
def test_english_words_need_boundaries_and_short_russian_words_endings(message: str) -> None:
    assert keyword_classification(message).confidence == "low"


def test_russian_stems_cover_inflections() -> None:
    for word in ["ошибка", "ошибку", "ошибки", "ошибкой"]:
        assert keyword_classification(f"Тут {word}").agent == "debug"
    for word in ["архитектура", "архитектуру", "архитектуры"]:
        assert keyword_classification(f"Нужна {word}").agent == "architect"
    for word in ["создай", "создать", "создайте"]:
        assert keyword_classification(f"{word} сервис").agent == "coder"
    assert keyword_classification("ОШИБКА В ЛОГАХ").reason == "keywords: ошиб, логах"


def test_ties_go_to_the_more_capable_agent() -> None:
    assert keyword_classification("fix the error").agent == "coder"  # coder 2, debug 2
    assert keyword_classification("plan for errors").agent == "architect"  # architect 2, debug 2
    assert keyword_classification("why the failure?").agent == "debug"  # debug 2, ask 1+1


def test_confidence_follows_the_margin() -> None:
    assert keyword_classification("Create the endpoint").confidence == "high"  # 2 vs 0
    assert keyword_classification("Look at this function").confidence == "medium"  # 1 vs 0
    assert keyword_classification("Fix the bug").confidence == "medium"  # tie
    assert keyword_classification("Fix the bug").reason == "keywords: fix"


def test_a_question_mark_only_leans() -> None:
    # ask 1 (how) + 1 (?) against coder 2 (write): the tie goes to the coder.
    assert keyword_classification("how to write tests?").agent == "coder"
    assert keyword_classification("how to write tests").agent == "coder"
    assert keyword_classification("where is the config?").reason == "keywords: where, ?"
