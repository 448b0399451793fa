"""Data-parallel train steps (art_core.training.distributed) on CPU: gloo, 2 spawned processes, the tiny model.

A 2-rank step equals the 1-process step (loss, gradients through AdamW's first moment, written adapter); its
checkpoint resumes on 1 rank; a rank killed mid-step fails the step naming it, with no process left behind. The
same with the ranks as actors of a real (local) Ray cluster, the way a step spans nodes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
from safetensors.torch import load_file

from art_core.storage import Storage
from art_core.store import ModelStore
from art_core.training.config import TrainConfig
from art_core.training.distributed import RankFailedError, rank_share, run_on_ranks, run_on_ray_ranks
from art_core.training.trainer import train_grpo_step
from art_core.trajectories import Trajectory
from tests.training.test_trainer import _groups

# Mini-batches of sequences of different lengths, so the ranks' shares differ and the weights must be global.
CFG = TrainConfig(learning_rate=1e-2, num_optimizer_steps=2, seed=3)
# Float32 sums taken in another order (ranks, then all-reduce) differ in the last bits. AdamW's first update is
# lr * g / (|g| + eps) per element, so an element whose gradient is near 0 turns that noise into a visible move:
# measured, a few elements of ~1e5 move by up to 2e-5 (0.2% of one step of lr 1e-2); gradients agree to 1e-5.
ADAPTER_ATOL = 1e-4


def _step_groups(step: int):
    groups = _groups(10 + step, n_groups=3, size=4, length=12) + _groups(20 + step, n_groups=1, size=4, length=30)
    return groups


def _train(model: str, store: Storage, name: str, step: int, ranks: int):
    return train_grpo_step(
        base_model=model,
        groups=_step_groups(step),
        config=CFG.model_copy(update={"ranks": ranks}),
        storage=store,
        project="p",
        name=name,
        step=step,
    )


def _files(store: Storage, name: str, step: int) -> tuple[dict, dict]:
    path = ModelStore(store, "p", name).checkpoint(step)
    adapter = load_file(os.path.join(path, "adapter_model.safetensors"))
    optimizer = torch.load(os.path.join(path, "optimizer.pt"))
    return adapter, optimizer


def _assert_same(a: dict, b: dict, relative: bool = False) -> None:
    """Equal within float32 noise; `relative`: to 1e-4 of each tensor's largest element (Adam's moments)."""
    assert a.keys() == b.keys()
    for k in a:
        if torch.is_tensor(a[k]) and a[k].numel() > 1:
            atol = 1e-4 * float(a[k].abs().max()) if relative else ADAPTER_ATOL
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=atol, msg=k)


@pytest.fixture(scope="module")
def runs(tiny_model_path, tmp_path_factory):
    """One run of 2 steps on 1 process ('one'), one whose step 0 ran on 2 ranks and step 1 on 1 ('two'), and one
    the other way round ('up': step 0 on 1 process, step 1 on 2 ranks)."""
    from art_core.training.session import clear_model_cache

    store = Storage(str(tmp_path_factory.mktemp("ranks")))
    clear_model_cache()
    results = {
        "one": [_train(tiny_model_path, store, "one", 0, 1)],
        "two": [_train(tiny_model_path, store, "two", 0, 2)],
        "up": [_train(tiny_model_path, store, "up", 0, 1)],
    }
    clear_model_cache()  # step 1 of 'one' from storage too, as 'two' does
    results["one"].append(_train(tiny_model_path, store, "one", 1, 1))
    results["two"].append(_train(tiny_model_path, store, "two", 1, 1))
    results["up"].append(_train(tiny_model_path, store, "up", 1, 2))
    clear_model_cache()
    return store, results


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
def test_a_two_rank_step_equals_the_one_process_step(runs):
    store, results = runs
    one, two = results["one"][0].metrics, results["two"][0].metrics
    assert two["ranks"] == 2 and "ranks" not in one
    assert_same_step(store, results, "two")


def assert_same_step(store: Storage, results: dict, name: str) -> None:
    """Run `name`'s step 0 equals run 'one''s: token counts, loss and statistics, the adapter and AdamW's state."""
    one, two = results["one"][0].metrics, results[name][0].metrics
    for key in ("trainable_tokens", "tokens", "tokens_in_batch", "trained_trajectories"):
        assert one[key] == two[key], key
    for key in ("loss", "grad_norm", "entropy", "kl_to_sampler", "clip_fraction"):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-7), key
    adapter_one, opt_one = _files(store, "one", 1)
    adapter_two, opt_two = _files(store, name, 1)
    _assert_same(adapter_one, adapter_two)
    # AdamW's first and second moments are built from the (summed once, clipped) gradients of every mini-batch.
    for i, state in opt_one["state"].items():
        _assert_same(state, opt_two["state"][i], relative=True)
    assert any(v.abs().sum() > 0 for k, v in adapter_two.items() if "lora_B" in k)


def test_a_checkpoint_written_on_two_ranks_resumes_on_one(runs):
    store, results = runs
    assert results["two"][1].step == 2 and ModelStore(store, "p", "two").is_complete(2)
    assert results["two"][1].metrics["loss"] == pytest.approx(results["one"][1].metrics["loss"], rel=1e-4, abs=1e-7)
    _assert_same(_files(store, "one", 2)[0], _files(store, "two", 2)[0])


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
def test_a_checkpoint_written_on_one_process_resumes_on_two_ranks(runs):
    store, results = runs
    assert results["up"][1].step == 2 and results["up"][1].metrics["ranks"] == 2
    assert results["up"][1].metrics["loss"] == pytest.approx(results["one"][1].metrics["loss"], rel=1e-4, abs=1e-7)
    _assert_same(_files(store, "one", 2)[0], _files(store, "up", 2)[0])


def _conversations() -> list[Trajectory]:
    """Six SFT conversations of different lengths, sharing a system prompt and a tool."""
    from tests.training.test_sft import CHAT, TOOLS

    out = []
    for i in range(6):
        chat = [dict(m) for m in CHAT]
        chat[1]["content"] = "Weather in " + " and ".join(["Hobart"] * (1 + 3 * i)) + "?"
        chat[-1]["content"] = f"{15 + i}C and cloudy." + " Bring a coat." * i
        out.append(Trajectory(messages_and_choices=chat, tools=TOOLS))
    return out


def _sft(model: str, store: Storage, name: str, step: int, ranks: int, shard_base: str = "auto"):
    from art_core.training.sft import TrainSFTConfig, sft_step

    return sft_step(
        base_model=model,
        trajectories=_conversations(),
        config=TrainSFTConfig(learning_rate=1e-2, batch_size=3),
        train_config=CFG.model_copy(update={"ranks": ranks, "shard_base": shard_base}),
        storage=store,
        project="p",
        name=name,
        step=step,
    )


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
def test_a_two_rank_sft_step_equals_the_one_process_step_and_resumes_on_one(tiny_model_path, tmp_path):
    """SFT splits each batch's conversations over the ranks as GRPO splits a mini-batch's sequences."""
    from art_core.training.session import clear_model_cache

    store = Storage(str(tmp_path))
    clear_model_cache()
    one, two = _sft(tiny_model_path, store, "sft-one", 0, 1), _sft(tiny_model_path, store, "sft-two", 0, 2)
    assert two.metrics["ranks"] == 2 and "ranks" not in one.metrics
    for key in ("examples", "batches", "trainable_tokens", "tokens_in_batch"):
        assert one.metrics[key] == two.metrics[key], key
    assert two.metrics["tokens_computed"] > one.metrics["tokens_computed"]  # each rank computes the shared prefix
    assert two.metrics["loss"] == pytest.approx(one.metrics["loss"], rel=1e-4)
    adapter_one, opt_one = _files(store, "sft-one", 1)
    adapter_two, opt_two = _files(store, "sft-two", 1)
    _assert_same(adapter_one, adapter_two)
    for i, state in opt_one["state"].items():
        _assert_same(state, opt_two["state"][i], relative=True)
    clear_model_cache()
    resumed, again = _sft(tiny_model_path, store, "sft-two", 1, 1), _sft(tiny_model_path, store, "sft-one", 1, 1)
    assert resumed.step == 2 and resumed.metrics["loss"] == pytest.approx(again.metrics["loss"], rel=1e-4)
    _assert_same(_files(store, "sft-one", 2)[0], _files(store, "sft-two", 2)[0])
    clear_model_cache()


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
def test_torchrun_trains_the_same_step(runs, tiny_model_path):
    """`torchrun -m art_core.training.torchrun_step` on 2 CPU processes writes the 1-process step's adapter."""
    store, _ = runs
    uri = store.join("p", "torchrun-groups.jsonl")
    ModelStore(store, "p", "torchrun").write_groups(uri, _step_groups(0))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    args = ["--base-model", tiny_model_path, "--groups", uri, "--storage", store.root, "--project", "p"]
    args += ["--name", "torchrun", "--step", "0", "--config", CFG.model_dump_json(exclude={"ranks"})]
    done = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "art_core.training.torchrun_step", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["step"] == 1 and result["metrics"]["ranks"] == 2
    _assert_same(_files(store, "one", 1)[0], _files(store, "torchrun", 1)[0])


def test_the_split_balances_tokens_and_keeps_every_sequence_once():
    lengths = [30, 12, 12, 12, 12, 30, 12, 12]
    shares = rank_share(lengths, [0, 1, 1, 1, 1, 0, 2, 2], 2)
    assert sorted(i for s in shares for i in s) == list(range(8))
    assert [sum(lengths[i] for i in s) for s in shares] == [66, 66]
    assert rank_share([5], [0], 2) == [[0], []]  # a rank may get nothing: it still joins the collectives


def sleep_on_ranks(seconds: float, raise_on: int | None = None) -> dict:
    """A step stand-in for the failure tests: join a collective; then rank 0 waits in the next one while the
    others sleep first (rank `raise_on` raises instead), so a rank that dies or raises leaves rank 0 blocked in a
    collective, as a real step's all-reduce would be."""
    import torch.distributed as dist

    dist.barrier()
    if raise_on is not None and str(raise_on) == os.environ["RANK"]:
        raise ValueError("the step failed on purpose")
    if os.environ["RANK"] != "0":
        time.sleep(seconds)
    dist.barrier()
    return {"ok": True}


def _gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def _kill_rank_1_during(launch) -> tuple[RankFailedError, list[int]]:
    """Launch 2 ranks of `sleep_on_ranks` with `launch`, SIGKILL rank 1 a second in; the error and the ranks' pids."""
    pids: list[int] = []

    def kill_rank_1(started: list[int]) -> None:
        pids.extend(started)
        time.sleep(1.0)
        os.kill(started[1], signal.SIGKILL)

    t0 = time.time()
    with pytest.raises(RankFailedError) as caught:
        launch(2, f"{__name__}.sleep_on_ranks", {"seconds": 120}, timeout_s=60, on_start=kill_rank_1)
    assert time.time() - t0 < 60  # the launcher noticed the death, not a timeout
    assert caught.value.rank == 1 and "rank 1 of 2" in str(caught.value)
    return caught.value, pids


def test_a_killed_rank_fails_the_step_naming_it_and_leaves_no_process():
    error, pids = _kill_rank_1_during(run_on_ranks)
    assert "SIGKILL" in str(error)
    assert _gone(pids)


def test_a_rank_that_raises_fails_the_step_with_its_error():
    """Rank 0, waiting in a collective, fails too when rank 1 leaves; the error names rank 1 and its own error."""
    pids: list[int] = []
    with pytest.raises(RankFailedError) as caught:
        run_on_ranks(
            2, f"{__name__}.sleep_on_ranks", {"seconds": 120, "raise_on": 1}, timeout_s=60, on_start=pids.extend
        )
    assert caught.value.rank == 1 and "the step failed on purpose" in str(caught.value)
    assert _gone(pids)


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for this module (2 CPUs: one a rank), stopped at its end."""
    from art_core.fanout import connect_ray, shutdown_ray

    connect_ray(None)
    yield
    shutdown_ray()


@pytest.mark.slow  # spawns ranks (make test hands slow files out first)
def test_a_two_rank_step_on_ray_actors_equals_the_one_process_step(runs, ray_cluster, tiny_model_path):
    store, results = runs
    ray = train_grpo_step(
        base_model=tiny_model_path,
        groups=_step_groups(0),
        config=CFG.model_copy(update={"ranks": 2, "ranks_on": "ray"}),
        storage=store,
        project="p",
        name="ray",
        step=0,
    )
    assert ray.metrics["ranks"] == 2 and ray.step == 1
    assert_same_step(store, {**results, "ray": [ray]}, "ray")


def test_a_killed_ray_rank_fails_the_step_naming_it_and_leaves_no_actor(ray_cluster):
    _, pids = _kill_rank_1_during(run_on_ray_ranks)
    deadline = time.time() + 20
    while not _gone(pids) and time.time() < deadline:  # ray.kill ends the actors' processes
        time.sleep(0.2)
    assert _gone(pids)


def test_a_ray_rank_that_raises_fails_the_step_with_its_error(ray_cluster):
    with pytest.raises(RankFailedError) as caught:
        run_on_ray_ranks(2, f"{__name__}.sleep_on_ranks", {"seconds": 120, "raise_on": 1}, timeout_s=60)
    assert caught.value.rank == 1 and "the step failed on purpose" in str(caught.value)


def test_ranks_on_ray_needs_more_than_one_rank():
    with pytest.raises(ValueError, match="ranks_on='ray'.*ranks is 1"):
        TrainConfig(ranks_on="ray")
