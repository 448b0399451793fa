"""Fixtures for the pipeline tests: an S3 server (moto) per module; the Prefect test server (`prefect_api`) is the
whole suite's, in tests/conftest.py.

def test_something(prefect_api, s3_root):   # s3_root: s3://<fresh bucket>/runs
"""

from __future__ import annotations

import logging
import os
import uuid

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server on loopback, with the AWS variables pointing at it (s3fs and boto3 read them).

    Module-scoped (it starts in well under a second) so the variables are put back after the module
    and tests elsewhere in the session never see them."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per S3 request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def s3_root(s3_server) -> str:
    """A fresh bucket (created with boto3: s3fs mkdir with a region is refused by moto); returns s3://bucket/runs."""
    import boto3

    bucket = f"art-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"]).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/runs"


@pytest.fixture(autouse=True)
def _wandb_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
