"""Fixtures for RULER's tests: the misbehaving local judge and options pointing at it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rewards.fake_judge import FakeJudge


@pytest.fixture(scope="session")
def fake_judge_server():
    judge = FakeJudge().start()
    yield judge
    judge.stop()


@pytest.fixture
def fake_judge(fake_judge_server: FakeJudge) -> FakeJudge:
    """The session's fake judge, with its request log and behaviours cleared."""
    fake_judge_server.reset()
    return fake_judge_server


@pytest.fixture
def judge_options(fake_judge: FakeJudge, tmp_path) -> dict[str, Any]:
    """ruler_score_group keywords for the fake judge: priced model name, fast backoff, a fresh cache."""
    return dict(
        judge_model="openai/gpt-4o-mini",  # a name in litellm's price map, so cost is computed
        extra_litellm_params={"api_base": fake_judge.base_url, "api_key": "test-key"},
        backoff_s=0.01,
        cache_root=str(tmp_path / "store"),
    )


@pytest.fixture
def s3_root(moto_s3) -> str:
    """A fresh bucket on a moto S3 server on loopback, AWS variables pointing at it (tests/conftest.py)."""
    return moto_s3
