"""Local tools: echo, and a calculator that only does bounded arithmetic."""

from __future__ import annotations

import time

import pytest

from services.orchestrator.turn.executors.local_tools import (
    LOCAL_TOOLS,
    MAX_EXPRESSION_CHARS,
    LocalResult,
    run_local_tool,
)


def calc(expression: str) -> LocalResult:
    return run_local_tool("calculator", {"expression": expression})


def test_the_local_tools() -> None:
    assert {"echo", "calculator"} == LOCAL_TOOLS


@pytest.mark.parametrize("text", ["hello", "", "  spaced\n", "1 + 1", "привет\x00"])
def test_echo_returns_text_unchanged(text: str) -> None:
    assert run_local_tool("echo", {"text": text}) == LocalResult(True, text)


def test_bad_arguments_and_unknown_tools_fail_cleanly() -> None:
    assert run_local_tool("echo", {}) == LocalResult(False, "echo needs a 'text' string")
    assert run_local_tool("calculator", {"expression": 3}) == LocalResult(
        False, "calculator needs an 'expression' string"
    )
    assert run_local_tool("read_file", {"path": "x"}) == LocalResult(
        False, "Unknown local tool: read_file"
    )


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("1 + 2", "3"),
        ("  2 * (3 + 4) ", "14"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("7 / 2", "3.5"),
        ("6 / 3", "2.0"),  # true division always gives a float
        ("0.1 + 0.2", "0.30000000000000004"),  # repr, not a rounded str
        ("2 ** 10", "1024"),
        ("2 ** -2", "0.25"),
        ("-2 ** 2", "-4"),
        ("+-+3", "-3"),
        ("1_000 * 3", "3000"),
        ("1e3", "1000.0"),
        ("2 ** 0.5", "1.4142135623730951"),
        ("2 ** 100", str(2**100)),  # ints stay exact
        ("+".join(["1"] * 250), "250"),  # long but shallow enough
    ],
)
def test_arithmetic(expression: str, result: str) -> None:
    assert calc(expression) == LocalResult(True, result)


@pytest.mark.parametrize("expression", ["1 / 0", "1 // 0", "5 % 0", "1.0 / 0.0", "0 ** -1"])
def test_division_by_zero_is_a_clear_failure(expression: str) -> None:
    assert calc(expression) == LocalResult(
        False, f"Cannot evaluate {expression!r}: division by zero"
    )


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("x + 1", "names are not allowed"),
        ("__import__('os').system('id')", "function calls are not allowed"),
        ("(1).real", "attributes are not allowed"),
        ("1 < 2", "comparisons are not allowed"),
        ("1 and 2", "boolean operators are not allowed"),
        ("True + 1", "only numbers are allowed, not True"),
        ("'a' * 3", "only numbers are allowed, not 'a'"),
        ("1j * 1j", "only numbers are allowed, not 1j"),
        ("2 ^ 3", "'^' is not supported; use ** for powers"),
        ("1 << 3", "BinOp is not allowed"),
        ("~1", "UnaryOp is not allowed"),
        ("[1, 2]", "List is not allowed"),
        ("(-8) ** 0.5", "the result is not a real number"),
    ],
)
def test_anything_but_arithmetic_is_refused(expression: str, reason: str) -> None:
    assert calc(expression) == LocalResult(False, f"Cannot evaluate {expression!r}: {reason}")


@pytest.mark.parametrize("expression", ["1 +", "import os", "1; 2", "lambda: 1"])
def test_syntax_errors(expression: str) -> None:
    result = calc(expression)
    assert not result.ok
    assert result.content.startswith(f"Cannot evaluate {expression!r}: ")


def test_empty_and_overlong_expressions() -> None:
    assert calc("  ") == LocalResult(False, "Cannot evaluate an empty expression")
    too_long = "1+" * (MAX_EXPRESSION_CHARS // 2) + "1"
    assert calc(too_long) == LocalResult(False, "Expressions are limited to 500 characters")
    assert calc(" " * 600 + "1").ok  # surrounding blanks do not count


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("2 ** 1001", "exponents are limited to 1000 in absolute value"),
        ("2 ** -1001", "exponents are limited to 1000 in absolute value"),
        ("9 ** 9 ** 9", "exponents are limited to 1000 in absolute value"),
        ("99999 ** 1000", "the result has more than 1000 digits"),  # refused before computing
        ("(2 ** 1000) ** 1000", "the result has more than 1000 digits"),
        ("10 ** 1000", "the result has more than 1000 digits"),
        ("(10 ** 999) * (10 ** 999)", "the result has more than 1000 digits"),
        ("1e308 * 10", "the result is too large"),
        ("1e999", "the result is too large"),
        ("10.0 ** 400", "the result is too large"),
        ("10 ** 400 * 1.0", "the result is too large"),  # int too large for a float
        ("-" * 400 + "1", "the expression is nested too deeply"),
    ],
)
def test_denial_of_service_is_bounded(expression: str, reason: str) -> None:
    started = time.perf_counter()
    result = calc(expression)
    assert time.perf_counter() - started < 0.5
    shown = expression if len(expression) <= 80 else expression[:77] + "..."
    assert result == LocalResult(False, f"Cannot evaluate {shown!r}: {reason}")


def test_the_largest_allowed_results() -> None:
    assert len(calc("2 ** 1000").content) == 302
    assert calc("10 ** 999") == LocalResult(True, "1" + "0" * 999)
    assert calc("-(10 ** 999)").content == "-1" + "0" * 999
