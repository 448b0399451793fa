"""deploy_model(deploy_to="together") through Together's SDK against a local stand-in of Together's API
(tests/deploy/conftest.py), the archive on a local S3 (moto): each request's method, path and body, the
polling up to ready and up to failed. The real service was not reached from here."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from art_core.deploy import DeployError, deploy_model
from art_core.storage import Storage
from art_core.store import ModelRef
from tests.deploy.conftest import ACCOUNT, write_checkpoint

BASE = "Qwen/Qwen2.5-72B-Instruct"  # served by Together; the adapter itself was trained on the tiny model
KEY = "tg-secret-key-0123456789"


@pytest.fixture
def stored(moto_s3, tiny_model_path, monkeypatch):
    monkeypatch.setenv("TOGETHER_API_KEY", KEY)
    storage = Storage(moto_s3)
    write_checkpoint(storage, "proj", "agent", 1, tiny_model_path)
    return storage, ModelRef(storage_url=moto_s3, project="proj", model="agent", base_model=tiny_model_path)


def _calls(api) -> list[tuple[str, str]]:
    return [(r["method"], r["path"]) for r in api.requests]


def _no_key_anywhere(storage: Storage, *texts: str) -> None:
    for path in storage.fs.find(storage.root):
        assert KEY.encode() not in storage.fs.cat_file(path), f"the API key was written to {path}"
    for text in texts:
        assert KEY not in text


async def test_upload_is_polled_until_ready_and_the_model_listed(stored, together_api):
    storage, ref = stored
    d = await deploy_model(
        deploy_to="together", model=ref, step=1, wait_for_completion=True, base_model=BASE, poll_interval_s=0.01
    )
    name = f"{ACCOUNT}/proj-agent-1"
    assert (d.target, d.status, d.model_name, d.endpoint, d.job_id) == (
        "together",
        "ready",
        name,
        together_api.url,
        "job-1",
    )
    assert _calls(together_api) == [
        ("POST", "/v1/models"),
        ("GET", "/v1/jobs/job-1"),
        ("GET", "/v1/jobs/job-1"),
        ("GET", "/v1/jobs/job-1"),
        ("GET", "/v1/models"),
    ]
    upload = together_api.requests[0]["body"]
    source = upload.pop("model_source")
    assert upload == {
        "model_name": "proj-agent-1",
        "model_type": "adapter",
        "base_model": BASE,
        "description": "Deployed from art-pipeline. Project: proj. Model: agent. Step: 1.",
    }
    # A presigned URL to the archive next to the export; Together fetched it and found the adapter at its root.
    url = urllib.parse.urlparse(source)
    assert url.path == "/runs/art/proj/models/agent/exports/0001.tar.gz" and "Signature" in url.query
    assert together_api.archive_files == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "export.json",
    ]
    assert all(r["auth"] == f"Bearer {KEY}" for r in together_api.requests)
    assert d.uri == f"{storage.root}/proj/models/agent/exports/0001.tar.gz" and storage.exists(d.uri)
    _no_key_anywhere(storage, d.model_dump_json())


async def test_failed_job_keeps_the_export_and_says_where(stored, together_api):
    storage, ref = stored
    together_api.script = ["Queued", "Running", "Failed"]
    with pytest.raises(DeployError) as err:
        await deploy_model("together", ref, 1, base_model=BASE, poll_interval_s=0.01)
    message = str(err.value)
    export = f"{storage.root}/proj/models/agent/exports/0001"
    assert "job-1" in message and together_api.failure in message and f"intact at {export}" in message
    assert _calls(together_api) == [("POST", "/v1/models")] + [("GET", "/v1/jobs/job-1")] * 3  # stopped at Failed
    assert storage.is_complete(export) and storage.exists(f"{export}/adapter_model.safetensors")
    _no_key_anywhere(storage, message)


async def test_without_waiting_the_job_is_checked_once(stored, together_api):
    _, ref = stored
    d = await deploy_model("together", ref, 1, wait_for_completion=False, base_model=BASE)
    assert (d.status, d.job_id) == ("queued", "job-1") and "Queued" in d.message
    assert _calls(together_api) == [("POST", "/v1/models"), ("GET", "/v1/jobs/job-1")]
    assert json.loads(d.model_dump_json())["model_name"] == f"{ACCOUNT}/proj-agent-1"
