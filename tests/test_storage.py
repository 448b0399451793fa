"""Storage: the layout, atomic writes, checkpoints that count only once their marker is written."""

import pathlib

import pytest

from art_core import Storage, Trajectory, TrajectoryGroup
from art_core.store import ModelStore


def test_layout_and_group_round_trip(tmp_path):
    store = ModelStore(str(tmp_path), "proj", "agent")  # the layout and the groups' file format are ModelStore's
    path = store.trajectories("train", 3)
    assert path == f"{tmp_path}/proj/models/agent/trajectories/train/0003.jsonl"
    groups = [TrajectoryGroup([Trajectory(reward=1.0)]), TrajectoryGroup([Trajectory(reward=0.5)])]
    assert store.write_groups(path, groups) == 2
    assert store.read_groups(path) == groups


def test_half_written_checkpoint_is_ignored(tmp_path):
    storage = Storage(str(tmp_path))
    store = ModelStore(storage, "p", "m")
    src = tmp_path / "adapter"
    src.mkdir()
    (src / "adapter_model.safetensors").write_bytes(b"w")
    storage.put_dir(str(src), store.checkpoint(1))
    assert storage.is_complete(store.checkpoint(1))
    half = pathlib.Path(store.checkpoint(2))
    half.mkdir(parents=True)
    (half / "adapter_model.safetensors").write_bytes(b"w")  # crashed before the marker
    assert not storage.is_complete(store.checkpoint(2))
    assert store.checkpoint_steps() == [1]
    assert store.latest_step() == 1


def test_history_appends_and_names_are_checked(tmp_path):
    storage = Storage(str(tmp_path))
    hist = ModelStore(storage, "p", "m").history
    storage.append_jsonl(hist, {"step": 1, "reward": 0.1})
    storage.append_jsonl(hist, {"step": 2, "reward": 0.2})
    assert [r["step"] for r in storage.read_jsonl(hist)] == [1, 2]
    with pytest.raises(ValueError, match="no '..'"):
        ModelStore(storage, "p", "../escape")
