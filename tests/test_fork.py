"""Forking a model (art_core.fork): the library door (ART's LocalBackend._experimental_fork_checkpoint) and the
pipeline's preflight, on a model folder laid out as training leaves it (the train flow's own fork is run end to
end in tests/pipeline/test_sft_grpo_flow.py)."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from art_core.fork import ForkError, fork_model, forked_evaluation
from art_core.storage import Storage
from art_core.store import ModelStore


def _trained(root: str, name: str = "src", steps: int = 4, base_model: str = "/models/tiny") -> ModelStore:
    """A model folder as a run of `steps` steps leaves it: SFT epochs 1-2, GRPO after, evaluations at 2 and 4."""
    store = ModelStore(root, "cs", name)
    storage = store.storage
    storage.write_json(store.model_json, {"base_model": base_model, "project": "cs", "name": name})
    storage.write_json(store.path("sft", "abc.json"), {"start_step": 0, "data": "d.jsonl", "spec": {"epochs": 2}})
    storage.write_json(store.path("sft", "1234.json"), {"start_step": 0, "data": "e.jsonl", "spec": {"epochs": 1}})
    for step in range(1, steps + 1):
        storage.write_text(storage.join(store.checkpoint(step), "adapter_model.safetensors"), f"weights {step}")
        storage.write_text(storage.join(store.checkpoint(step), "COMPLETE"), "ok\n")
        kind = "sft" if step <= 2 else "train"
        storage.append_jsonl(store.history, {"step": step, f"{kind}/loss": 1.0 / step})
        if step > 2:
            storage.write_text(store.trajectories("train", step - 1), "{}\n")
        if step % 2 == 0:
            storage.write_json(store.eval(step), {"step": step, "reward": 0.1 * step})
            storage.write_text(store.trajectories("val", step), "{}\n")
    storage.write_text(store.path("lease", "00000001.json"), "{}")
    storage.write_text(store.path("reports", "eval.md"), "report")
    return store


def _run_config(root, base_model: str, **fields):
    """The pipeline's RunConfig of model cs/v2 under `root`, with `fields` (fork_from, sft, ...)."""
    from art_pipeline.flows.config import RunConfig

    return RunConfig(
        project="cs",
        model="v2",
        base_model=base_model,
        storage_url=str(root),
        environment={"name": "word-quiz"},
        **fields,
    )


def test_a_fork_is_the_source_as_it_stood_at_the_step(tmp_path):
    source = _trained(str(tmp_path))
    target = ModelStore(str(tmp_path), "cs", "fork")
    assert fork_model(source, target, not_after_step=3) == 3
    assert target.checkpoint_steps() == [1, 2, 3] and target.latest_step() == 3
    assert Storage(str(tmp_path)).read_text(target.storage.join(target.checkpoint(3), "adapter_model.safetensors")) == (
        "weights 3"
    )
    assert [r["step"] for r in target.read_history()] == [1, 2, 3]
    assert [e["step"] for e in target.read_evals()] == [2]
    # rollouts of steps 2 (trained checkpoint 3) kept; step 3's (they trained checkpoint 4) and the run's own not
    folder = tmp_path / "cs" / "models" / "fork"
    assert sorted(p.name for p in (folder / "trajectories" / "train").iterdir()) == ["0002.jsonl"]
    assert not (folder / "lease").exists() and not (folder / "reports").exists()
    assert sorted(p.name for p in (folder / "sft").iterdir()) == ["1234.json", "abc.json"]  # SFT stages: found done
    meta = target.read_model_json()
    assert meta["base_model"] == "/models/tiny" and meta["name"] == "fork"
    assert meta["forked_from"] == {"project": "cs", "model": "src", "step": 3, "storage": str(tmp_path)}
    assert source.checkpoint_steps() == [1, 2, 3, 4] and len(source.read_history()) == 4  # only read

    assert fork_model(source, target, not_after_step=3) == 3  # again: nothing to do
    source.storage.write_text(source.storage.join(source.checkpoint(5), "COMPLETE"), "ok\n")  # the source trains on
    assert fork_model(source, target) == 3  # a rerun asking for the latest resumes the fork it made
    with pytest.raises(ForkError, match=r"has trained already \(checkpoints 1, 2, 3\).*new model name"):
        fork_model(source, target, not_after_step=2)  # another fork into a model that holds work: refused
    with pytest.raises(ForkError, match=r"at or before step 0: its checkpoints are steps 1, 2, 3, 4, 5"):
        fork_model(source, ModelStore(str(tmp_path), "cs", "other"), not_after_step=0)
    with pytest.raises(ForkError, match="no complete checkpoint"):
        fork_model(ModelStore(str(tmp_path), "cs", "missing"), ModelStore(str(tmp_path), "cs", "other"))


def test_a_forked_step_keeps_its_evaluation_only_under_the_same_settings(tmp_path):
    source = _trained(str(tmp_path))
    source.write_eval(2, {"step": 2, "reward": 0.5, "settings": "abc"})
    source.write_eval(2, {"step": 2, "reward": 0.1, "settings": "tst"}, "test")
    target = ModelStore(str(tmp_path), "cs", "fork")
    assert forked_evaluation(target, 2, "abc") is None  # not forked yet
    fork_model(source, target, not_after_step=3)
    assert forked_evaluation(target, 2, "abc")["reward"] == 0.5  # copied with the checkpoint it measured
    assert forked_evaluation(target, 2, "other") is None  # other sampling, tasks or tries: evaluate again
    assert forked_evaluation(target, 2, "tst", "test")["reward"] == 0.1  # the test split's, copied beside val's
    target.write_eval(4, {"step": 4, "reward": 0.9, "settings": "abc"})
    assert forked_evaluation(target, 4, "abc") is None  # after the fork: the fork's own weights
    assert forked_evaluation(source, 2, "abc") is None  # the source was not forked
    assert forked_evaluation(ModelStore(str(tmp_path), "cs", "fork2"), 2, "") is None


def test_the_library_door_forks_as_art_does(tmp_path):
    from art_core import TrainableModel
    from art_core.local import LocalBackend

    _trained(str(tmp_path))
    backend = LocalBackend(path=str(tmp_path))
    model = TrainableModel(name="v2", project="cs", base_model="/models/tiny")
    step = asyncio.run(backend._experimental_fork_checkpoint(model, from_model="src", not_after_step=2, verbose=True))
    assert step == 2 and backend.model_store(model).checkpoint_steps() == [1, 2]
    assert asyncio.run(backend._experimental_fork_checkpoint(model, from_model="src", not_after_step=2)) == 2
    other = TrainableModel(name="v3", project="cs", base_model="/models/other")
    # a model on another base model: refused before the copy (registering would refuse it only after)
    with pytest.raises(ForkError, match=r"trained from base model '/models/tiny'.*'/models/other'.*own base model"):
        asyncio.run(backend._experimental_fork_checkpoint(other, from_model="src"))
    assert not (tmp_path / "cs" / "models" / "v3").exists()  # nothing copied
    backend.model_store(other).bind("/models/other")  # registered with another base model
    with pytest.raises(ForkError, match="an adapter fits only its own base model"):
        asyncio.run(backend._experimental_fork_checkpoint(other, from_model="src"))
    assert backend.model_store(other).checkpoint_steps() == []  # nothing changed


def test_the_pipeline_refuses_a_fork_it_cannot_make_before_any_work(tmp_path, tiny_model_path):
    from art_pipeline.flows.preflight import PreflightError, preflight

    _trained(str(tmp_path), base_model=tiny_model_path)
    _trained(str(tmp_path), name="gemma-src", base_model="/models/gemma-3-270m")

    def config(**fork):
        return _run_config(tmp_path, tiny_model_path, fork_from=fork)

    with pytest.raises(PreflightError, match=r"fork_from.*cs/nope.*no complete checkpoint"):
        preflight(config(model="nope"))
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        config(model="src", step=0)
    with pytest.raises(PreflightError, match=r"fork_from.*trained from base model '/models/gemma-3-270m'.*own base"):
        preflight(config(model="gemma-src"))  # another base model's adapters: refused before the copy
    assert not (tmp_path / "cs" / "models" / "v2").exists()
    assert preflight(config(model="src", step=3)).fork_from.step == 3  # a fork that can be made passes
    _trained(str(tmp_path), name="v2", steps=1, base_model=tiny_model_path)  # ... until the name trained on its own
    with pytest.raises(PreflightError, match="cs/v2 has trained already.*new model name"):
        preflight(config(model="src", step=3))
    json.dumps(config(model="src").model_dump())  # the form's value: plain JSON


def test_a_fork_meant_for_grpo_is_refused_before_sft_starts_again_on_other_demonstrations(tmp_path, tiny_model_path):
    """A fork at the last SFT epoch finds its SFT done only if the run's SFT is the one the source ran. With other
    demonstrations (the expert's code changed since, say) the run would fine-tune again on top of it: refused,
    naming both, before any epoch."""
    import shutil

    from art_core.sft import check_fork_keeps_sft, sft_key
    from art_core.store import ModelRef
    from art_pipeline.flows.config import PreflightError, RunConfig
    from art_pipeline.flows.sft import sft_stage

    old, new = tmp_path / "demos-old.jsonl", tmp_path / "demos-new.jsonl"
    for path, reply in ((old, "hello"), (new, "hello there")):
        turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": reply}]
        path.write_text(json.dumps({"messages": turns}) + "\n")

    def config(demonstrations: str, **sft) -> RunConfig:
        sft = {"epochs": 2, "demonstrations": demonstrations, **sft}
        return _run_config(tmp_path, tiny_model_path, steps=4, sft=sft, fork_from={"model": "src", "step": 2})

    source = _trained(str(tmp_path), base_model=tiny_model_path)
    shutil.rmtree(tmp_path / "cs" / "models" / "src" / "sft")
    spec = config(str(old)).sft.spec()  # its SFT (checkpoints 1-2) ran on the old file
    marker = {"start_step": 0, "data": str(old), "spec": spec.model_dump()}
    source.storage.write_json(source.path("sft", f"{sft_key(str(old), spec)}.json"), marker)
    target = ModelStore(str(tmp_path), "cs", "v2")
    fork_model(source, target, not_after_step=2)
    ref = ModelRef(storage_url=str(tmp_path), project="cs", model="v2", base_model=tiny_model_path)

    with pytest.raises(PreflightError, match=r"fork_from: src \(forked at step 2\) was fine-tuned on other demonstr"):
        sft_stage(config(str(new)), ref)
    with pytest.raises(PreflightError) as refused:
        sft_stage(config(str(old), peak_lr=1e-3), ref)  # the same file on another schedule: a new stage too
    assert "peak_lr 0.0002 -> 0.001" in str(refused.value) and str(old) in str(refused.value)
    assert "2 more SFT epochs (checkpoints 3-4)" in str(refused.value)
    assert target.checkpoint_steps() == [1, 2] and len(list((tmp_path / "cs" / "models" / "v2" / "sft").iterdir())) == 1
    check_fork_keeps_sft(target, str(old), config(str(old)).sft.spec(), "src")  # the source's own SFT: found done
    old.write_text(new.read_text())  # the file it trained on, edited since
    with pytest.raises(ValueError, match=r"fine-tuned on .*demos-old.jsonl before its contents changed; this run"):
        check_fork_keeps_sft(target, str(old), config(str(old)).sft.spec(), "src")

    plain = _trained(str(tmp_path), name="plain", base_model=tiny_model_path)  # a source that never ran SFT
    shutil.rmtree(tmp_path / "cs" / "models" / "plain" / "sft")
    bare = ModelStore(str(tmp_path), "cs", "bare")
    fork_model(plain, bare, not_after_step=2)
    check_fork_keeps_sft(bare, str(new), config(str(new)).sft.spec(), "plain")  # fine-tuning its fork is the ask
