"""Fixtures of the trainer tests: the session's tiny model and its tokenizer, and a fresh trainer per test."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture
def fresh_trainer():
    """Forget the trainer's in-process model cache before and after a test (so tests do not share state)."""
    from art_core.training.session import clear_model_cache

    clear_model_cache()
    yield
    clear_model_cache()


@pytest.fixture
def s3_root(moto_s3) -> str:
    """A moto S3 server on loopback with a fresh bucket; the AWS variables point at it. Returns s3://bucket/art."""
    return moto_s3
