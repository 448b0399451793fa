"""Helpers for tests, the demo and benchmarks: an offline tiny model, and (later) a scripted judge."""

from art_core.testing.tiny_model import build_tiny_model, model_info

__all__ = ["build_tiny_model", "model_info"]
