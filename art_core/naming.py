"""How things are named: a trained step on a server, and a project or model in storage.

A leaf module (it imports nothing from art_core), so the serving layer, the adapter manager and the
storage layout can all use one rule without importing each other.

    >>> step_name("agent", 3)
    'agent@3'
    >>> parse_step_name("agent@3")
    ('agent', 3)
    >>> validate_name("agent-001", "model name")
    'agent-001'
"""

from __future__ import annotations

import re

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def step_name(name: str, step: int) -> str:
    """The served name of one step: `agent@3` (step 0: the zero adapter, i.e. the base model).

    >>> step_name("agent", 3)
    'agent@3'
    """
    return f"{name}@{step}"


def parse_step_name(served: str) -> tuple[str, int] | None:
    """`('agent', 3)` for `agent@3`; None for a name without a step.

    >>> parse_step_name("agent"), parse_step_name("agent@12")
    (None, ('agent', 12))
    """
    name, sep, step = served.rpartition("@")
    return (name, int(step)) if sep and name and step.isdigit() else None


def validate_name(value: str, what: str = "name") -> str:
    """Refuse names that could escape the storage layout: empty, path separators, '..', odd characters.

    >>> validate_name("agent-001")
    'agent-001'
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    if "/" in value or "\\" in value or ".." in value or not _NAME_RE.match(value) or len(value) > 128:
        raise ValueError(
            f"{what} {value!r} is not allowed: use letters, digits, '.', '_' and '-' (starting with a letter "
            "or digit, at most 128 characters), with no path separators and no '..'"
        )
    return value
