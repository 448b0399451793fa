"""ModelStore: the one owner of the storage layout, and what it does with files a crash or a copy damaged."""

from __future__ import annotations

import json
import logging

import pytest

from art_core.storage import Storage
from art_core.store import BaseModelMismatch, ModelStore
from art_core.trajectories import DamagedRollouts, Trajectory, TrajectoryGroup


def _groups(n: int = 2) -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup(
            [
                Trajectory(messages_and_choices=[{"role": "user", "content": f"hi {i}"}], reward=float(i))
                for i in range(2)
            ]
        )
        for _ in range(n)
    ]


def test_layout_is_spelled_in_one_place(tmp_path):
    storage = Storage(str(tmp_path))
    store = ModelStore(storage, "demo", "agent")
    assert store.checkpoint(3) == f"{tmp_path}/demo/models/agent/checkpoints/0003"
    assert store.trajectories("train", 0) == f"{tmp_path}/demo/models/agent/trajectories/train/0000.jsonl"
    assert not any(hasattr(storage, helper) for helper in ("model", "checkpoint_path", "checkpoint_steps"))
    assert store.scored("train", 1).endswith("trajectories/train/0001.scored.jsonl")
    assert store.history.endswith("demo/models/agent/history.jsonl")
    assert store.eval(2).endswith("demo/models/agent/eval/0002.json")
    with pytest.raises(ValueError, match="not allowed"):
        ModelStore(storage, "demo", "../escape")


def test_bind_refuses_another_base_model_naming_both(tmp_path):
    store = ModelStore(str(tmp_path), "demo", "agent")
    store.bind("/models/a", environment={"name": "2048"})
    store.bind("/models/a")  # the same base again is fine, and keeps what was recorded
    assert store.read_model_json()["environment"] == {"name": "2048"}
    with pytest.raises(BaseModelMismatch) as e:
        store.bind("/models/b")
    assert "/models/a" in str(e.value) and "/models/b" in str(e.value)


def test_a_damaged_rollout_file_is_named_with_its_line_not_read_as_missing(tmp_path, caplog):
    store = ModelStore(str(tmp_path), "demo", "agent")
    uri = store.trajectories("train", 0)
    store.write_groups(uri, _groups())
    assert len(store.read_groups(uri)) == 2
    with open(uri) as f:
        text = f.read()
    first = text.index("\n") + 1
    for cut, line in ((first + 40, 2), (first, 2)):  # mid-line, and exactly at a line's end
        with open(uri, "w") as f:
            f.write(text[:cut])  # a partial copy, a full disk
        with pytest.raises(DamagedRollouts, match=f"rollout file {uri} is damaged at line {line}: "):
            store.read_groups(uri)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="art_core.store"):
            assert store.read_groups(uri, damaged="warn") is None  # for a gather, which rolls the step out again
        assert f"{uri} is damaged at line {line}" in caplog.text
    assert store.read_groups(store.trajectories("train", 5)) is None  # missing: None, no warning needed


def test_a_null_reward_or_a_stray_byte_names_the_line_and_why(tmp_path):
    store = ModelStore(str(tmp_path), "demo", "agent")
    uri = store.trajectories("train", 1)
    store.write_groups(uri, _groups(3))
    lines = open(uri).read().splitlines()
    bad = json.loads(lines[1])
    bad["trajectories"][1]["reward"] = None  # what a NaN reward was stored as before it was refused
    with open(uri, "w") as f:
        f.write("\n".join([lines[0], json.dumps(bad), lines[2]]) + "\n")
    with pytest.raises(
        DamagedRollouts, match="damaged at line 2: trajectories.1.reward: Input should be a valid number"
    ):
        store.read_groups(uri)
    with open(uri, "wb") as f:
        f.write(("\n".join(lines[:2]) + "\n").encode() + b'{"trajectories": [], "metadata": {"x": "\xe9"}}\n')
    with pytest.raises(DamagedRollouts, match="damaged at line 3: not UTF-8 text"):
        store.read_groups(uri)


def test_a_non_finite_reward_is_refused_at_the_write_and_text_that_is_not_utf8_is_escaped(tmp_path, caplog):
    store = ModelStore(str(tmp_path), "demo", "agent")
    uri = store.trajectories("train", 2)
    groups = _groups()
    groups[1].trajectories[0].reward = float("inf")
    with pytest.raises(ValueError, match="group 1 trajectory 0 has reward inf"):
        store.write_groups(uri, groups)
    assert not store.storage.exists(uri)  # nothing half-written

    tool = {"role": "tool", "content": "ls: caf\udce9.txt"}  # a file name with a stray byte, decoded as Python does
    groups = [TrajectoryGroup([Trajectory(messages_and_choices=[tool], reward=1.0, metrics={"turns": float("nan")})])]
    with caplog.at_level(logging.WARNING):
        store.write_groups(uri, groups)
    (back,) = store.read_groups(uri)
    t = back.trajectories[0]
    assert t.messages()[0]["content"] == "ls: caf\\udce9.txt" and t.metrics["invalid_utf8_escaped"] == 1
    assert t.metrics["turns"] != t.metrics["turns"]  # a NaN metric reads back as NaN (not null, which fails)
    assert "escaped 1 characters that are not valid UTF-8" in caplog.text


def test_checkpoint_without_marker_is_ignored_and_named(tmp_path, caplog):
    store = ModelStore(str(tmp_path), "demo", "agent")
    for step in (1, 2):
        store.storage.write_text(store.storage.join(store.checkpoint(step), "adapter_config.json"), "{}")
    store.storage.write_text(store.storage.join(store.checkpoint(1), "COMPLETE"), "ok\n")
    with caplog.at_level(logging.WARNING, logger="art_core.store"):
        assert store.checkpoint_steps() == [1]
    assert store.checkpoint(2) in caplog.text
    assert store.latest_step() == 1


def test_history_skips_a_damaged_line_and_the_next_record_repairs_the_file(tmp_path):
    store = ModelStore(str(tmp_path), "demo", "agent")
    store.record(1, {"reward": 0.5})
    with open(store.history, "a") as f:
        f.write('{"step": 2, "train/rew')  # killed mid-write
    assert [r["step"] for r in store.read_history()] == [1]
    store.record(2, {"reward": 0.7})
    lines = open(store.history).read().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert store.step_metrics(2) == {"train/reward": 0.7}


def test_backfill_writes_a_lost_train_record_from_the_checkpoint_once(tmp_path):
    store = ModelStore(str(tmp_path), "demo", "agent")
    folder = store.checkpoint(1)
    store.storage.write_json(store.storage.join(folder, "trainer_state.json"), {"step": 1, "metrics": {"loss": 0.25}})
    assert store.backfill_train_record(1) is None  # no marker: the checkpoint does not exist yet
    store.storage.write_text(store.storage.join(folder, "COMPLETE"), "ok\n")
    record = store.backfill_train_record(1, extra={"reward": 0.4})
    assert record["train/loss"] == 0.25 and record["train/reward"] == 0.4 and record["train/backfilled"] == 1.0
    assert store.backfill_train_record(1) is None  # already there: nothing is recorded twice
    assert [r["step"] for r in store.read_history()] == [1]


def test_an_evaluation_on_another_split_keeps_the_val_report(tmp_path):
    # evaluating step 2 on test (or train) after val must not replace val's report, which the run's curves,
    # model card and resume read
    store = ModelStore(str(tmp_path), "demo", "agent")
    store.write_eval(2, {"step": 2, "reward": 0.4, "split": "val"})
    store.write_eval(2, {"step": 2, "reward": 0.9, "split": "test"}, "test")
    store.write_eval(4, {"step": 4, "reward": 0.7, "split": "train"}, "train")
    assert store.read_eval(2)["reward"] == 0.4
    assert store.read_eval(2, "test")["reward"] == 0.9
    assert store.eval(2, "test").endswith("demo/models/agent/eval/test/0002.json")
    assert [(r["step"], r["reward"]) for r in store.read_evals()] == [(2, 0.4)]
    assert [(r["step"], r["reward"]) for r in store.read_evals("train")] == [(4, 0.7)]
    assert store.read_evals("test") == [{"step": 2, "reward": 0.9, "split": "test"}]


def test_damaged_eval_report_is_skipped(tmp_path, caplog):
    store = ModelStore(str(tmp_path), "demo", "agent")
    store.write_eval(1, {"step": 1, "reward": 0.3, "model": "agent@1"})
    store.storage.write_text(store.eval(2), '{"step": 2, "rew')
    with caplog.at_level(logging.WARNING, logger="art_core.store"):
        assert [r["step"] for r in store.read_evals()] == [1]
    assert store.eval(2) in caplog.text
    assert store.read_eval(2) is None


def test_one_record_per_step_and_phase(tmp_path):
    store = ModelStore(str(tmp_path), "demo", "agent")
    store.record(1, {"reward": 0.1})
    store.record(1, {"reward": 0.3}, prefix="val/")
    store.record(1, {"reward": 0.2})  # step 1 trained again (its checkpoint was lost): replaces, never doubles
    records = store.read_history()
    assert [(r["step"], sorted(k for k in r if "/" in k)) for r in records] == [
        (1, ["val/reward"]),
        (1, ["train/reward"]),
    ]
    assert store.step_metrics(1) == {"train/reward": 0.2}


def test_a_trained_and_recorded_step_is_recognised_in_three_storage_calls(tmp_path, monkeypatch):
    """A resumed run asks storage whether each step is done: on S3 every call is a round trip, so a finished
    step costs one marker check and one history read (exists + read), not the five calls and three reads of
    before, and its rollouts are not read. The train task hands over the marker it checked (`complete`)."""
    from art_core.step import already_trained

    store = ModelStore(str(tmp_path), "demo", "agent")
    folder = store.checkpoint(1)
    store.storage.write_text(store.storage.join(folder, "COMPLETE"), "ok\n")
    store.record(1, {"loss": 0.25, "reward": 0.5})
    calls: list[str] = []
    for name in ("exists", "read_text", "read_json", "write_text"):
        real = getattr(store.storage, name)
        monkeypatch.setattr(
            store.storage, name, lambda *a, _real=real, _name=name, **kw: (calls.append(_name), _real(*a, **kw))[1]
        )

    read_rollouts: list[int] = []

    def rollouts():
        read_rollouts.append(1)
        return _groups()

    done = already_trained(store, rollouts, 1)
    assert done is not None and not done.trained and done.metrics == {"loss": 0.25, "reward": 0.5}
    assert calls == ["exists", "exists", "read_text"], calls  # the marker; history.jsonl exists, is read

    calls.clear()  # the marker the train task checked already is not checked again
    assert already_trained(store, rollouts, 1, complete=True).metrics == done.metrics
    assert calls == ["exists", "read_text"], calls
    assert read_rollouts == []  # recorded: the rollouts are never read
    assert already_trained(store, None, 2) is None  # no checkpoint 2: still to train


def test_a_trained_step_whose_record_a_crash_lost_gets_it_back_with_its_rollouts_rewards(tmp_path):
    from art_core.step import already_trained

    store = ModelStore(str(tmp_path), "demo", "agent")
    folder = store.checkpoint(1)
    store.storage.write_json(store.storage.join(folder, "trainer_state.json"), {"step": 1, "metrics": {"loss": 0.25}})
    store.storage.write_text(store.storage.join(folder, "COMPLETE"), "ok\n")
    done = already_trained(store, _groups, 1, complete=True)  # read now: the record is written back with them
    assert done.metrics["loss"] == 0.25 and done.metrics["reward"] == 0.5 and done.metrics["backfilled"] == 1.0
    assert store.train_metrics(1) == done.metrics
