"""model.log also logs to the model's W&B run when one is configured (ART's behaviour), read back from the
offline run's own files: the record's metrics at training_step, one run per model (resumed by id), and
nothing sent to W&B when none is configured."""

from __future__ import annotations

import glob
import json
import time

import pytest

from art_core import Model, TrainableModel, Trajectory, TrajectoryGroup, wandb_metrics
from art_core.storage import Storage
from art_core.store import ModelStore
from tests.test_model import RecordingBackend


def _records(run_file: str):
    """The protobuf Records of an offline run's .wandb file (a LevelDB-style log: 32 KiB blocks of chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, pending = open(run_file, "rb").read(), 7, b""  # 7 bytes of file header (":W&B", version)
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header is padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):  # still being written
            return
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def _history(run_dir: str) -> tuple[dict, list[dict]]:
    """The run record and the history rows an offline run wrote."""
    (path,) = glob.glob(f"{run_dir}/run-*.wandb")
    deadline = time.monotonic() + 60
    while not any(r.WhichOneof("record_type") == "exit" for r in _records(path)):  # wandb-core writes after finish()
        assert time.monotonic() < deadline, f"{path} never got its exit record"
        time.sleep(0.2)
    run, rows = {}, []
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = {"id": record.run.run_id, "project": record.run.project, "name": record.run.display_name}
        elif kind == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            rows.append({k: v for k, v in items.items() if not k.startswith("_")})  # _step, _runtime: wandb's own
    return run, rows


@pytest.fixture
def offline(tmp_path, monkeypatch):
    for key, value in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wb"), "WANDB_SILENT": "true"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "wb").mkdir()
    backend = RecordingBackend()
    backend.storage = Storage(str(tmp_path / "art"))
    yield backend, tmp_path / "wb"
    wandb_metrics.finish_runs()


async def test_log_sends_each_record_to_the_models_run_at_its_training_step(offline, monkeypatch):
    backend, wb = offline
    model = TrainableModel(
        name="agent-1", project="retail", base_model="/m", report_metrics=["wandb"], run_name="first-try"
    )
    await model.register(backend)
    group = TrajectoryGroup([Trajectory(reward=1.0, metrics={"win": 1}), Trajectory(reward=0.0, metrics={"win": 0})])
    train = await model.log([group], split="train", metrics={"loss": 0.25}, step=4)
    val = await model.log([Trajectory(reward=0.75)], split="val", step=2)  # out of order: training_step says where
    wandb_metrics.finish_runs()

    (run_dir,) = glob.glob(str(wb / "wandb" / "offline-run-*"))
    run, rows = _history(run_dir)
    assert run == {"id": "first-try", "project": "retail", "name": "first-try"}  # ART 0.5.20: the run is run_name's
    assert rows == [{**train, "training_step": 4}, {**val, "training_step": 2}]
    assert rows[0]["train/reward"] == 0.5 and rows[0]["train/loss"] == 0.25

    # A later log (as from another process, here writing elsewhere) resumes the same run id, not a new run.
    monkeypatch.setenv("WANDB_DIR", str(wb.parent / "wb2"))
    (wb.parent / "wb2").mkdir()
    later = await model.log([Trajectory(reward=1.0)], split="val", step=5)
    wandb_metrics.finish_runs()
    (again,) = glob.glob(str(wb.parent / "wb2" / "wandb" / "offline-run-*"))
    run, rows = _history(again)
    assert run["id"] == "first-try" and rows == [{**later, "training_step": 5}]


async def test_no_wandb_unless_configured_and_a_missing_key_is_named(offline, monkeypatch):
    backend, wb = offline
    plain = Model(name="gpt-4.1", project="retail")  # report_metrics unset and no WANDB_API_KEY: ART logs no W&B
    await plain.register(backend)
    await plain.log([Trajectory(reward=0.5)], step=1)
    off = TrainableModel(name="agent-2", project="retail", base_model="/m", report_metrics=[])
    await off.register(backend)
    await off.log([Trajectory(reward=0.5)], step=1)
    assert not glob.glob(str(wb / "wandb" / "*run-*")) and not wandb_metrics._runs

    monkeypatch.setenv("WANDB_MODE", "online")
    asked = TrainableModel(name="agent-3", project="retail", base_model="/m", report_metrics=["wandb"])
    await asked.register(backend)
    with pytest.raises(ValueError, match="WANDB_API_KEY is not set.*WANDB_MODE=offline"):
        await asked.log([Trajectory(reward=0.5)], step=1)
    assert not backend.storage.exists(
        ModelStore(backend.storage, "retail", "agent-3").history
    )  # refused before writing
