"""Forking a model whose source is in S3 (ART's from_s3_bucket and prefix), against a real S3 endpoint (moto)."""

from __future__ import annotations

import asyncio

from tests.test_fork import _trained


def test_a_fork_reads_its_source_from_s3(s3_server, tmp_path):
    """The source in a bucket under a prefix, the fork in local storage."""
    import uuid

    import boto3

    from art_core import TrainableModel
    from art_core.local import LocalBackend

    bucket = f"art-{uuid.uuid4().hex[:10]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    _trained(f"s3://{bucket}/backups")
    backend = LocalBackend(path=str(tmp_path))
    model = TrainableModel(name="v2", project="cs", base_model="/models/tiny")
    fork = backend._experimental_fork_checkpoint(
        model, "src", from_s3_bucket=bucket, prefix="backups", not_after_step=3
    )
    assert asyncio.run(fork) == 3
    store = backend.model_store(model)
    assert store.checkpoint_steps() == [1, 2, 3] and [r["step"] for r in store.read_history()] == [1, 2, 3]
    assert store.read_model_json()["forked_from"]["storage"] == f"s3://{bucket}/backups"
