"""Tools the runtime executes itself instead of sending them to the IDE (pure functions).

``calculator`` evaluates arithmetic from the model, i.e. untrusted input: it walks the
``ast`` of the expression and allows numbers, ``+ - * / // % **``, unary signs and
parentheses only. Each step is bounded so that no expression can exhaust CPU or memory.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LOCAL_TOOLS", "MAX_EXPRESSION_CHARS", "LocalResult", "calculate", "run_local_tool"]

LOCAL_TOOLS = frozenset({"echo", "calculator"})
MAX_EXPRESSION_CHARS = 500
# Deep enough for any 500-character sum (`1+1+...`), shallow enough for the C stack.
_MAX_DEPTH = 300
_MAX_EXPONENT = 1000
_MAX_DIGITS = 1000
# An int result may have at most _MAX_DIGITS digits; in bits that is about 3.33 per digit.
_INT_LIMIT = 10**_MAX_DIGITS
_MAX_BITS = _INT_LIMIT.bit_length()

Number = int | float
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_REFUSED: dict[type[ast.AST], str] = {
    ast.Name: "names are not allowed",
    ast.Call: "function calls are not allowed",
    ast.Attribute: "attributes are not allowed",
    ast.Compare: "comparisons are not allowed",
    ast.BoolOp: "boolean operators are not allowed",
}


@dataclass(frozen=True)
class LocalResult:
    """Outcome of a local tool: ``content`` is the result, or the error when not ``ok``."""

    ok: bool
    content: str


class _Refused(ValueError):
    """The expression is outside the supported arithmetic or its limits."""


def _checked(value: Any) -> Number:
    if isinstance(value, complex):
        raise _Refused("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Refused("the result is too large")
    if isinstance(value, int) and abs(value) >= _INT_LIMIT:
        raise _Refused(f"the result has more than {_MAX_DIGITS} digits")
    number: Number = value
    return number


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > _MAX_EXPONENT:
        raise _Refused(f"exponents are limited to {_MAX_EXPONENT} in absolute value")
    # Refuse before computing: 999**999 is cheap to predict and costly to build.
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        predicted_bits = (abs(base).bit_length() - 1) * exponent
    else:
        predicted_bits = 0  # float results are bounded by _checked (inf) or OverflowError
    if predicted_bits > _MAX_BITS:
        raise _Refused(f"the result has more than {_MAX_DIGITS} digits")
    return _checked(base**exponent)


def _evaluate(node: ast.AST, depth: int) -> Number:
    if depth > _MAX_DEPTH:
        raise _Refused("the expression is nested too deeply")
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, depth + 1)
    if isinstance(node, ast.Constant):
        # bool is an int subclass: True + 1 is not arithmetic the model should rely on.
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise _Refused(f"only numbers are allowed, not {node.value!r}")
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_evaluate(node.operand, depth + 1)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _evaluate(node.left, depth + 1)
        right = _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        return _checked(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise _Refused("'^' is not supported; use ** for powers")
    reason = _REFUSED.get(type(node), f"{type(node).__name__} is not allowed")
    raise _Refused(reason)


def calculate(expression: str) -> LocalResult:
    """Evaluate ``expression``; ints stay exact, floats are shown with ``repr``."""
    text = expression.strip()
    shown = text if len(text) <= 80 else text[:77] + "..."  # the error must stay readable
    if not text:
        return LocalResult(False, "Cannot evaluate an empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        return LocalResult(False, f"Expressions are limited to {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        return LocalResult(False, f"Cannot evaluate {shown!r}: invalid syntax ({detail})")
    try:
        value = _evaluate(tree, 0)
    except ZeroDivisionError:
        return LocalResult(False, f"Cannot evaluate {shown!r}: division by zero")
    except OverflowError:
        return LocalResult(False, f"Cannot evaluate {shown!r}: the result is too large")
    except _Refused as exc:
        return LocalResult(False, f"Cannot evaluate {shown!r}: {exc}")
    return LocalResult(True, repr(value) if isinstance(value, float) else str(value))


def run_local_tool(name: str, arguments: Mapping[str, Any]) -> LocalResult:
    """Run the local tool ``name``; arguments were validated against its schema already."""
    if name == "echo":
        text = arguments.get("text")
        if not isinstance(text, str):
            return LocalResult(False, "echo needs a 'text' string")
        return LocalResult(True, text)
    if name == "calculator":
        expression = arguments.get("expression")
        if not isinstance(expression, str):
            return LocalResult(False, "calculator needs an 'expression' string")
        return calculate(expression)
    return LocalResult(False, f"Unknown local tool: {name}")
