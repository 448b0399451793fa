"""Fixtures for the ported ART examples: a LocalBackend on the session's vLLM server, and a moto S3 bucket.

The ports change only `import art` -> `import art_core as art` (and `art.local` -> `art_core.local`);
besides that, each says where it departs from the original for the test machine: the tiny model
instead of Qwen, the session's vLLM server instead of a new one, fewer rollouts, and our vLLM-served
tiny model as the RULER judge.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def s3_bucket(monkeypatch):
    """ART's BACKUP_BUCKET on a moto S3 server on loopback (AWS variables point at it for this test)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                 "AWS_ENDPOINT_URL": endpoint, "BACKUP_BUCKET": "art-backup"}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="art-backup")
    yield "art-backup"
    server.stop()
