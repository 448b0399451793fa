"""Helpers for tests, the demo and benchmarks: an offline tiny model, and (later) a scripted judge.

    from art_core.testing import build_tiny_model
    build_tiny_model("./.models/tiny")

Names are imported on first use, so `python -m art_core.testing.tiny_model PATH` runs the module once
(importing it here first makes runpy warn about running a module that is already loaded).
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_tiny_model", "model_info"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from art_core.testing import tiny_model

        return getattr(tiny_model, name)
    raise AttributeError(f"module 'art_core.testing' has no attribute {name!r}")
