"""`calculator`: arithmetic on numbers, never code. The expression is parsed with `ast` and only an allow-list
of nodes is evaluated: numbers (int, float), + - * / // % **, unary + and -, and parentheses. Anything else (a
name, a call, an attribute, a string, a comparison) is refused with ValueError, which the runner turns into
an `environment_error` observation. Powers are bounded (|exponent| <= MAX_EXPONENT, result <= MAX_DIGITS
digits) so `9**9**9` cannot hang the run.

Results: an integer value prints as an integer (`6`, also for `12/2`), anything else as Python's `repr` of the
float, so `float(result)` equals Python's own arithmetic on the same expression (tests/test_environments.py).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from typing import Any

from prefpipe.grpo.environments.base import ToolCall
from prefpipe.grpo.environments.registry import register_environment

MAX_EXPONENT = 1000
MAX_DIGITS = 300
MAX_LENGTH = 200  # characters of one expression

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} is larger than {MAX_EXPONENT}")
    whole = isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and base not in (0, 1, -1)
    if whole and exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise ValueError(f"the result would have more than {MAX_DIGITS} digits")
    return base**exponent


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError(f"not arithmetic: {type(node).__name__} is not allowed")


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression (ValueError for anything else, ZeroDivisionError for x/0)."""
    text = expression.strip()
    if len(text) > MAX_LENGTH:
        raise ValueError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"cannot parse {text!r}") from exc
    return _eval(tree)


def format_number(value: int | float) -> str:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


class Calculator:
    tools = ("calc",)

    def reset(self, row: Mapping[str, Any]) -> None:
        pass

    def step(self, call: ToolCall) -> str:
        return format_number(evaluate(call.argument))


@register_environment("calculator")
def calculator(options: Mapping[str, Any]) -> Calculator:
    if options:
        raise ValueError(f"the calculator takes no options, got {sorted(options)}")
    return Calculator()
