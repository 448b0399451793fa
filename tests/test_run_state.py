"""RunState: what the train flow decides about each step from what storage holds (resume, SFT's epochs,
repair, off-policy prefetch, evaluations), on a real local store without Prefect or a server.

    pytest tests/test_run_state.py
"""

from __future__ import annotations

import logging

import pytest

from art_core.run_state import RunState, StepPlan, run_length
from art_core.storage import Storage
from art_core.store import ModelStore
from art_core.trajectories import Trajectory, TrajectoryGroup


@pytest.fixture
def store(tmp_path) -> ModelStore:
    return ModelStore(Storage(str(tmp_path)), "demo", "agent")


def complete(store: ModelStore, *steps: int) -> None:
    """Checkpoints as a finished train step or SFT epoch leaves them: the COMPLETE marker written last."""
    for step in steps:
        store.storage.write_text(store.storage.join(store.checkpoint(step), "COMPLETE"), "ok\n")


def rollouts(store: ModelStore, *steps: int) -> None:
    for step in steps:
        group = TrajectoryGroup([Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=1.0)])
        store.write_groups(store.trajectories("train", step), [group])


def test_a_new_run_starts_at_step_0_with_nothing_trained(store):
    run = RunState(store, last=3)
    assert [run.plan(s) for s in range(3)] == [StepPlan(step=s, trained=False, sft=False) for s in range(3)]


def test_a_resumed_run_knows_which_steps_are_trained_and_which_were_sft_epochs(store):
    """SFT's epochs are checkpoints 1..epochs with no rollouts; GRPO's steps have theirs; step 3 crashed."""
    complete(store, 1, 2, 3)
    rollouts(store, 2, 3)  # step 2 trained checkpoint 3 on rollouts; step 3 gathered, then the run died
    run = RunState(store, last=5)
    assert [run.plan(s) for s in range(4)] == [
        StepPlan(step=0, trained=True, sft=True),
        StepPlan(step=1, trained=True, sft=True),
        StepPlan(step=2, trained=True, sft=False),  # GRPO: its cached tasks return, nothing is trained again
        StepPlan(step=3, trained=False, sft=False),
    ]


def test_a_checkpoint_without_its_marker_is_not_trained_and_not_an_sft_epoch(store):
    store.storage.write_text(store.storage.join(store.checkpoint(1), "adapter_config.json"), "{}")
    assert RunState(store, last=2).plan(0) == StepPlan(step=0, trained=False, sft=False)


def test_synchronous_steps_sample_their_own_checkpoint(store):
    run = RunState(store, last=4)
    assert [run.sample_step(s) for s in range(4)] == [0, 1, 2, 3]


def test_off_policy_steps_sample_the_newest_complete_checkpoint_not_after_them(store):
    complete(store, 1)
    run = RunState(store, last=4, off_policy=1)
    assert [run.sample_step(s) for s in range(4)] == [0, 1, 1, 1]
    assert [run.oldest_reusable(s) for s in range(4)] == [0, 0, 1, 2]
    assert RunState(store, last=4, off_policy=3).oldest_reusable(5) == 2


def test_prefetch_starts_the_next_k_steps_within_the_run_once(store):
    run = RunState(store, last=5, off_policy=2)
    assert run.prefetch(0, started=set()) == [1, 2]
    assert run.prefetch(1, started={2}) == [3]
    assert run.prefetch(3, started=set()) == [4]  # the run ends with checkpoint 5: step 4 is its last
    assert run.prefetch(4, started=set()) == []


def test_prefetch_skips_sft_epochs_and_synchronous_runs_prefetch_nothing(store):
    complete(store, 2)  # checkpoint 2 without rollouts of step 1: an SFT epoch
    assert RunState(store, last=5, off_policy=2).prefetch(0, started=set()) == [2]
    assert RunState(store, last=5, off_policy=0).prefetch(0, started=set()) == []


def test_a_cached_file_that_is_gone_or_damaged_is_repaired_unless_the_step_is_trained(store, caplog):
    """The cache says done, storage lacks the file: the gather (or score) runs again, but only for a step
    whose checkpoint does not exist yet; a trained step never needs its rollouts again."""
    run = RunState(store, last=3)
    uri = store.trajectories("train", 0)
    pending, trained = StepPlan(step=0, trained=False, sft=False), StepPlan(step=0, trained=True, sft=False)
    assert run.lost(pending, uri) and not run.lost(trained, uri)  # missing
    rollouts(store, 0)
    assert not run.lost(pending, uri)  # there and readable
    store.storage.write_text(uri, store.storage.read_text(uri)[:-20])  # cut short
    with caplog.at_level(logging.WARNING, logger="art_core.store"):
        assert run.lost(pending, uri)
    assert "read as absent" in caplog.text and uri in caplog.text
    assert not run.lost(trained, uri)


@pytest.mark.parametrize(
    ("every", "due"),
    [(0, []), (1, [1, 2, 3, 4, 5]), (2, [2, 4, 5]), (5, [5]), (10, [5])],
)
def test_evaluations_come_every_k_checkpoints_and_at_the_last(store, every, due):
    run = RunState(store, last=5, eval_every=every)
    assert [c for c in range(1, 6) if run.eval_due(c)] == due


def test_a_lost_evaluation_report_is_written_back_once(store):
    run = RunState(store, last=2, eval_every=1)
    assert run.keep_eval(1, {"reward": 0.5}) is True
    assert store.read_eval(1)["reward"] == 0.5
    assert run.keep_eval(1, {"reward": 0.9}) is False  # the stored report stands
    assert store.read_eval(1)["reward"] == 0.5
    # the same step evaluated on test: its own report, written back beside val's and not mistaken for it
    assert run.keep_eval(1, {"reward": 0.2, "split": "test"}) is True
    assert store.read_eval(1, "test")["reward"] == 0.2
    assert store.read_eval(1)["reward"] == 0.5


def test_grpo_continues_after_sfts_last_epoch():
    assert run_length(5, sft_start=0, sft_epochs=2) == 5  # checkpoints 1-2 SFT, 3-5 GRPO
    assert run_length(4, sft_start=3, sft_epochs=2) == 5  # SFT began on a model with 3 checkpoints


def test_changing_sft_settings_mid_stage_says_a_new_stage_starts_and_what_changed(store, tmp_path, caplog):
    from art_core.sft import SFTSpec, sft_plan

    data = str(tmp_path / "demos.jsonl")
    with open(data, "w") as f:
        f.write('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n')
    assert sft_plan(store, data, SFTSpec(epochs=2))[1] == 0
    complete(store, 1)  # the first of its 2 epochs is done; the run stops
    assert sft_plan(store, data, SFTSpec(epochs=2))[1] == 0  # the same settings again: the same stage goes on
    assert "differ" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="art_core.sft"):
        assert sft_plan(store, data, SFTSpec(epochs=1))[1] == 1  # other settings: a new stage, on checkpoint 1
    assert "differ from the stage that began at checkpoint 0 (epochs 2 -> 1), 1 of whose 2 epochs are done" in (
        caplog.text
    )
    assert "a new stage starts at checkpoint 1" in caplog.text
    caplog.clear()
    complete(store, 2)  # that stage is done; the first one now counts as finished too (nothing left below 2)
    with caplog.at_level(logging.WARNING, logger="art_core.sft"):
        sft_plan(store, data, SFTSpec(epochs=3))
    assert "differ" not in caplog.text
