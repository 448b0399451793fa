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
def s3_root(monkeypatch):
    """A fresh bucket on a moto S3 server on loopback, AWS variables pointing at it; returns s3://bucket/art."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": endpoint}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="ruler-cache")
    yield "s3://ruler-cache/art"
    server.stop()
