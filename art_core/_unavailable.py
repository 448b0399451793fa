"""Module-level `__getattr__` for ART submodules this project cannot serve: importing one works (so a script
fails where it uses the name, with the reason), and any name taken from it raises NotImplementedError."""

from __future__ import annotations

from typing import Any, Callable

_TOOL_HOOKS = {
    "setup_module",
    "teardown_module",
    "setup_function",
    "teardown_function",
    "setUpModule",
    "tearDownModule",
    "setup",
    "teardown",
    "load_tests",
}


def refuse_all(module: str, why: str) -> Callable[[str], Any]:
    """A module `__getattr__` that refuses every public name, saying why.

    >>> refuse_all("art_core.tinker", "hosted")("TinkerService")
    Traceback (most recent call last):
    NotImplementedError: art_core.tinker.TinkerService is not available: hosted
    """

    def __getattr__(name: str) -> Any:
        # Tools probe modules for optional hooks (inspect/pickle dunders; pytest's `pytest_plugins`, `pytestmark`,
        # `setup_module`, ... when collecting doctests): those must see a plain module without them.
        if name.startswith(("_", "pytest")) or name in _TOOL_HOOKS:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        raise NotImplementedError(f"{module}.{name} is not available: {why}")

    return __getattr__
