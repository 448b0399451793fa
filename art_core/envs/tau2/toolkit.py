"""What tau2's tools share: parameter shorthands, argument coercions, and the two generic tools.

A tool is `fn(db, **kwargs)` (run by `art_core.envs.tool_use.tools.run_tool`, whose defaults are tau2's rules).
It mutates `db` for writes and raises (any exception, as in tau2) to refuse; the agent then reads
`Error: <message>`. A returned str is shown as is, a number as its text, anything else as JSON, the way
tau2's environment turns tool results into tool messages.

    >>> from art_core.envs.tool_use.tools import run_tool
    >>> run_tool({"calculate": calculate}, {}, "calculate", {"expression": "2 * (3 + 4)"})
    ('14.0', False)
    >>> run_tool({"calculate": calculate}, {}, "calculate", {"expression": "__import__('os')"})
    ('Error: Invalid characters in expression', True)
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from art_core.envs.tool_use.tools import function_schema

# tau2's calculate accepts digits, + - * /, parentheses, dots and spaces, and rounds to 2 places
_CALC_CHARS = set("0123456789+-*/(). ")
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def integer(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


def calculate(db: dict[str, Any], expression: str) -> str:
    """Evaluate + - * / over numbers and parentheses; the result rounded to 2 decimals, as text."""
    if not all(c in _CALC_CHARS for c in expression):
        raise ValueError("Invalid characters in expression")
    return str(round(float(_eval(ast.parse(expression, mode="eval").body)), 2))


def _eval(node: ast.AST) -> float:
    # a walk over the parsed expression instead of eval(): the character check already admits only
    # arithmetic, and this keeps it that way
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):  # "**" passes tau2's character check too
        base, exponent = _eval(node.left), _eval(node.right)
        if abs(exponent) > 64:  # 9**9**9 would hang the episode
            raise ValueError("Exponent too large")
        return base**exponent
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError("Invalid expression")


def transfer_to_human_agents(db: dict[str, Any], summary: str) -> str:
    """Hand the customer to a human. Not terminal in tau2: the user simulator ends with ###TRANSFER###."""
    return "Transfer successful"


CALCULATE_SCHEMA = function_schema(
    "calculate",
    "Compute an arithmetic expression and return the result rounded to two decimals.",
    {
        "expression": string(
            "The expression, e.g. '2 + 2'. Only numbers, + - * /, parentheses, dots and spaces are allowed."
        )
    },
)
TRANSFER_SCHEMA = function_schema(
    "transfer_to_human_agents",
    "Transfer the customer to a human agent with a summary of their issue. Transfer only when the customer "
    "explicitly asks for a human, or when the policy and the available tools cannot solve their issue.",
    {"summary": string("A summary of the customer's issue.")},
)


def as_int(value: Any, what: str) -> int:
    """An integer the way pydantic's lax mode reads one (3, 3.0 and "3" are 3; 3.5 is refused)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError(f"{what} must be an integer, got {value!r}")


def as_record(value: Any, fields: tuple[str, ...], what: str) -> dict[str, str]:
    """A dict with exactly `fields` as strings (extra keys dropped, as pydantic models drop them)."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object with {', '.join(fields)}, got {value!r}")
    missing = [f for f in fields if f not in value]
    if missing:
        raise ValueError(f"{what} lacks {', '.join(missing)}")
    return {f: str(value[f]) for f in fields}
