"""LocalBackend's storage side without a vLLM server: checkpoints from S3 (moto), refusals that say why."""

from __future__ import annotations

import json
import os

import pytest

from art_core import Model, TrainableModel
from art_core.local_backend import LocalBackend
from art_core.store import ModelStore


@pytest.fixture
def s3_env(monkeypatch):
    """A moto S3 server on loopback with a fresh bucket; the AWS variables point at it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }.items():
        monkeypatch.setenv(k, v)
    boto3.client("s3", endpoint_url=f"http://{host}:{port}").create_bucket(Bucket="art")
    yield "s3://art/runs"
    server.stop()


def test_remote_checkpoints_are_copied_to_a_local_dir_vllm_can_read(s3_env, tmp_path):
    backend = LocalBackend(path=s3_env, cache_dir=str(tmp_path / "cache"))
    model = TrainableModel(name="agent", project="demo", base_model="/models/tiny")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    backend.storage.put_dir(str(adapter), backend.model_store(model).checkpoint(1))

    local = backend.local_checkpoint(model, 1)
    assert local.startswith(str(tmp_path / "cache")) and not local.startswith("s3://")
    assert json.load(open(os.path.join(local, "adapter_config.json")))["r"] == 8
    assert open(os.path.join(local, "adapter_model.safetensors"), "rb").read() == b"weights"
    with pytest.raises(FileNotFoundError, match=r"complete steps: \[1\]"):
        backend.local_checkpoint(model, 2)


async def test_register_refuses_another_base_model_and_plain_models(tmp_path):
    backend = LocalBackend(path=str(tmp_path / "store"))
    model_json = ModelStore(backend.storage, "demo", "agent").model_json
    backend.storage.write_json(model_json, {"name": "agent", "project": "demo", "base_model": "/models/a"})
    # Checked before any server starts: checkpoints trained on /models/a do not fit /models/b.
    with pytest.raises(ValueError, match="trained from base model '/models/a'"):
        await TrainableModel(name="agent", project="demo", base_model="/models/b").register(backend)
    with pytest.raises(TypeError, match="serves TrainableModels"):
        await Model(name="judge", project="demo").register(backend)
    hosted = Model(name="gpt", project="demo", inference_base_url="https://api.example.com/v1")
    await hosted.register(backend)  # a model with its own endpoint needs nothing from us
    with pytest.raises(RuntimeError, match="not registered"):
        await backend.train(TrainableModel(name="other", project="demo", base_model="/models/a"), [])
