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
    from art_core.training.trainer import clear_model_cache

    clear_model_cache()
    yield
    clear_model_cache()


@pytest.fixture
def s3_root(monkeypatch) -> str:
    """A moto S3 server on loopback with a fresh bucket; the AWS variables point at it. Returns s3://bucket/art."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="trainer")
    yield "s3://trainer/art"
    server.stop()
