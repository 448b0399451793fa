"""deploy_model's refusals (before anything leaves the machine) and the W&B target in offline mode: the artifact
holds the adapter files and the metadata W&B Inference reads, named as ART names it."""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import struct
import time

import pytest

from art_core.deploy import DeployError, UnsupportedBaseModelError, deploy_model, together, wandb_lora
from art_core.storage import Storage
from art_core.store import ModelRef, ModelStore
from tests.deploy.conftest import write_checkpoint


@pytest.fixture
def stored(tmp_path, tiny_model_path):
    storage = Storage(str(tmp_path / "art"))
    write_checkpoint(storage, "proj", "agent", 1, tiny_model_path)
    return storage, ModelRef(storage_url=storage.root, project="proj", model="agent", base_model=tiny_model_path)


async def test_bad_input_is_refused_before_anything_is_uploaded(stored, monkeypatch):
    storage, ref = stored
    exports = ModelStore(storage, "proj", "agent").path("exports")
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")

    with pytest.raises(ValueError, match="vllm, merged, together, wandb"):
        await deploy_model("sagemaker", ref, 1)
    with pytest.raises(DeployError, match=r"step 7 .* does not exist.*complete steps: \[1\]"):
        await deploy_model("merged", ref, 7)
    for target, module in (("together", together), ("wandb", wandb_lora)):  # the tiny model is served by neither
        with pytest.raises(UnsupportedBaseModelError) as err:
            await deploy_model(target, ref, 1)
        assert all(base in str(err.value) for base in module.SUPPORTED_BASE_MODELS)
    with pytest.raises(DeployError, match="TOGETHER_API_KEY is not set"):
        await deploy_model("together", ref, 1, base_model="Qwen/Qwen2.5-72B-Instruct")
    with pytest.raises(DeployError, match="upload_to='s3://"):  # local storage: no URL Together could fetch
        await deploy_model("together", ref, 1, base_model="Qwen/Qwen2.5-72B-Instruct", api_key="k")
    with pytest.raises(DeployError, match="WANDB_API_KEY is not set"):
        await deploy_model("wandb", ref, 1, base_model="Qwen/Qwen2.5-14B-Instruct")
    with pytest.raises(DeployError, match="no config.json"):
        await deploy_model("merged", ref.model_copy(update={"base_model": "/nowhere/base"}), 1)
    assert not storage.exists(exports), "a refused deployment must not have exported anything"


def _artifact_records(run_file: str):
    """The artifact records of an offline run's .wandb file (a LevelDB-style log of wandb protobuf Records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, pending = open(run_file, "rb").read(), 7, b""  # 7 bytes of file header (":W&B", version)
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a record header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "artifact":
                yield record.artifact


async def test_wandb_offline_artifact_holds_the_adapter_and_its_metadata(stored, tmp_path, monkeypatch):
    storage, ref = stored
    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "wb"),
        "WANDB_ENTITY": "team",
        "WANDB_DATA_DIR": str(tmp_path / "wbdata"),
        "WANDB_SILENT": "true",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    os.makedirs(tmp_path / "wb")
    d = await deploy_model("wandb", ref, 1, base_model="Qwen/Qwen2.5-14B-Instruct")
    assert (d.status, d.uri, d.model_name) == ("offline", "proj/agent:step1", "wandb-artifact:///team/proj/agent:step1")
    assert d.endpoint == "https://api.inference.wandb.ai/v1" and "wandb sync" in d.message

    (run_file,) = glob.glob(str(tmp_path / "wb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    # wandb's service process writes the run file through a buffer: the last records can land a moment after
    # run.finish() returns (one full-suite run read the file before its artifact record was there).
    deadline = time.monotonic() + 30
    while not (records := list(_artifact_records(run_file))) and time.monotonic() < deadline:
        time.sleep(0.2)
    (artifact,) = records
    assert (artifact.name, artifact.type, sorted(artifact.aliases)) == ("agent", "lora", ["latest", "step1"])
    import json

    assert json.loads(artifact.metadata) == {
        "wandb.base_model": "Qwen/Qwen2.5-14B-Instruct",
        "project": "proj",
        "model": "agent",
        "step": 1,
        "export_uri": d.export_uri,
    }
    entries = {e.path: e for e in artifact.manifest.contents}
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= set(entries)
    assert not any(p.startswith("optimizer") for p in entries), "trainer state must not ship with the adapter"
    for path in ("adapter_config.json", "adapter_model.safetensors"):  # the very bytes of the export, staged for sync
        exported = open(os.path.join(d.export_uri, path), "rb").read()
        assert entries[path].digest == base64.b64encode(hashlib.md5(exported).digest()).decode()
        assert open(entries[path].local_path, "rb").read() == exported
