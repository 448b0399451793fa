"""The train flow on the tiny model, against a real Prefect test server, real vLLM and S3 on loopback (moto).

What a user relies on: a run leaves checkpoints, trajectories and metrics in s3://; running it again
finishes from cache and checkpoints without rolling out or training; a run killed with SIGKILL mid-step
resumes without redoing finished work; an unreachable judge fails loudly and keeps the rollouts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Iterable

import pytest

from art_core.store import ModelStore
from art_pipeline.flows.config import RunConfig

pytestmark = pytest.mark.vllm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_config(model_path: str, storage_url: str, inference_url: str, name: str = "agent", **update) -> RunConfig:
    """Three tiny steps of tic-tac-toe (moves constrained, so rewards vary and GRPO has a signal)."""
    cfg = dict(
        project="pipe",
        model=name,
        base_model=model_path,
        storage_url=storage_url,
        inference_url=inference_url,
        environment={"name": "tic-tac-toe", "options": {"constrain_moves": True}},
        steps=3,
        groups_per_step=2,
        group_size=4,
        train={"learning_rate": 2e-3, "old_logprobs": "recompute"},
        sampling={"max_tokens": 8},
        eval_every=3,
        eval={"scenarios": 2, "trials": 2},
        report_to_wandb=False,
    )
    cfg.update(update)
    return RunConfig(**cfg)


def s3_objects(url: str) -> dict[str, str]:
    """key -> ETag of every object under an s3:// prefix (an unchanged ETag means it was not rewritten)."""
    import s3fs

    fs = s3fs.S3FileSystem()
    return {p: info["ETag"] for p, info in fs.find(url, detail=True).items()}


def task_states(flow_run_id, expect: Iterable[str] = (), timeout: float = 30.0) -> dict[str, str]:
    """Task run name -> state name ('Cached', 'Completed', ...) for one flow run, read from the Prefect API.

    Prefect 3 records task runs from the events the run sends, in batches once a second (flows.lifetime), so
    a moment after the flow has returned the API can still miss a task run or say Running. Read again until
    every task run is final and those named in `expect` are all there; with no `expect`, until the answer
    has not changed for longer than the recorder's flush interval.
    """
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline, expect = time.monotonic() + timeout, set(expect)
    last, since = None, time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
            # A task run recorded from its first event may have no state yet: not final, read again.
            states = {r.name: r.state.name if r.state else "(no state yet)" for r in runs}
            final = all(r.state and r.state.is_final() for r in runs) and expect <= set(states)
            if states != last or not final:
                last, since = states, time.monotonic()
            if final and (expect or time.monotonic() - since > 1.5) or time.monotonic() > deadline:
                return states
            time.sleep(0.2)


def history(storage_url: str, cfg: RunConfig) -> list[dict]:
    from art_core.reporting import read_history
    from art_core.storage import Storage

    return read_history(Storage(storage_url), cfg.project, cfg.model)


def run_flow(cfg: RunConfig):
    """Run the train flow; return (summary, flow run id)."""
    from art_pipeline.flows.train import train

    state = train(cfg, return_state=True)
    return state.result(), state.state_details.flow_run_id


@pytest.fixture(scope="module")
def trained(prefect_api, s3_server, tiny_model_path, vllm_server):
    """One 3-step run on S3, shared by the tests that look at what it left."""
    import boto3

    old_key = os.environ.get("ART_INFERENCE_API_KEY")
    os.environ["ART_INFERENCE_API_KEY"] = vllm_server.api_key or ""
    bucket = f"art-{uuid.uuid4().hex[:10]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    cfg = run_config(tiny_model_path, f"s3://{bucket}/runs", vllm_server.base_url)
    summary, run_id = run_flow(cfg)
    yield cfg, summary, run_id, s3_objects(cfg.storage_url)
    if old_key is None:
        os.environ.pop("ART_INFERENCE_API_KEY", None)
    else:
        os.environ["ART_INFERENCE_API_KEY"] = old_key


def test_three_steps_write_checkpoints_trajectories_and_metrics_to_s3(trained):
    cfg, summary, run_id, objects = trained
    model = f"{cfg.storage_url.removeprefix('s3://')}/pipe/models/agent"
    for step in (1, 2, 3):
        assert f"{model}/checkpoints/{step:04d}/COMPLETE" in objects
        assert f"{model}/checkpoints/{step:04d}/adapter_model.safetensors" in objects
    for step in (0, 1, 2):
        assert f"{model}/trajectories/train/{step:04d}.jsonl" in objects
    assert summary.trained_steps == [1, 2, 3]
    train_records = [r for r in history(cfg.storage_url, cfg) if "train/reward" in r]
    assert [r["step"] for r in train_records] == [1, 2, 3]
    assert all(0.0 <= r["train/reward"] <= 1.0 for r in train_records)
    assert f"{model}/eval/0003.json" in objects and f"{model}/reports/reward_curve.png" in objects
    assert any(k.startswith(f"{cfg.storage_url.removeprefix('s3://')}/.prefect/results/") for k in objects)
    states = task_states(run_id, expect=["gather step 1", "train step 3"])
    assert states["gather step 1"] == "Completed" and states["train step 3"] == "Completed"
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        artifacts = {a.key: a for a in client.read_artifacts() if a.flow_run_id == run_id}
    assert artifacts["pipe-agent-metrics"].type == "table"
    assert "data:image/png;base64," in artifacts["pipe-agent-reward-curve"].data
    assert "pass^1" in artifacts["pipe-agent-eval"].data


def test_same_run_again_finishes_from_cache_without_rollouts_or_training(trained, vllm_server):
    cfg, first, _, objects_before = trained
    requests_before = _vllm_requests(vllm_server)
    t0 = time.perf_counter()
    summary, run_id = run_flow(cfg)
    elapsed = time.perf_counter() - t0
    assert summary.trained_steps == [], "a step was trained again"
    assert summary.rewards == first.rewards
    expect = [f"{task} step {step}" for task in ("gather", "train") for step in (1, 2, 3)]
    states = task_states(run_id, expect=[*expect, "evaluate step 3 on val"])
    for step in (1, 2, 3):  # task runs count steps from 1, as the flow's log does
        assert states[f"gather step {step}"] == "Cached"
        assert states[f"train step {step}"] == "Cached"  # the checkpoint existed: nothing trained
    assert not [name for name in states if name.startswith("score")], "no judge: nothing to score, no score task"
    assert states["evaluate step 3 on val"] == "Cached"
    assert _vllm_requests(vllm_server) == requests_before, "the re-run sent requests to the model"
    after = s3_objects(cfg.storage_url)
    rewritten = [
        k for k, etag in objects_before.items() if "/checkpoints/" in k or "/trajectories/" in k if after.get(k) != etag
    ]
    assert rewritten == []
    assert elapsed < 60


def test_sigkill_mid_step_then_rerun_resumes_without_redoing_work(
    prefect_api, s3_root, tiny_model_path, vllm_endpoint, monkeypatch
):
    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    cfg = run_config(tiny_model_path, s3_root, vllm_endpoint.base_url, name="killed")
    run_name = f"kill-{uuid.uuid4().hex[:8]}"
    script = (
        "import json, sys\n"
        "from art_pipeline.flows.config import RunConfig\nfrom art_pipeline.flows.train import train\n"
        f"train.with_options(flow_run_name={run_name!r})(RunConfig.model_validate_json(sys.argv[1]))\n"
    )
    env = dict(os.environ, PREFECT_API_URL=prefect_api)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, cfg.model_dump_json()],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Step 2's rollouts are in storage. Watched there, not through the Prefect API: the server records task
        # runs a second or so late (flows.lifetime), by when step 3 could have finished too.
        _wait_for_object(
            ModelStore(cfg.storage_url, cfg.project, cfg.model).trajectories("train", 1), proc, timeout=300
        )
        os.kill(proc.pid, signal.SIGKILL)  # during step 2: its rollouts are done, scoring/training under way
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    store = ModelStore(cfg.storage_url, cfg.project, cfg.model)
    done_before = store.checkpoint_steps()
    assert 1 in done_before and 3 not in done_before
    before = s3_objects(cfg.storage_url)
    summary, run_id = run_flow(cfg)

    states = task_states(run_id, expect=["gather step 1", "gather step 2"])
    # Step 1's cache record may not be committed yet when the kill lands; then the task finds its rollouts
    # in storage (Completed, not Cached). Either way nothing is rolled out again (ETags checked below).
    assert states["gather step 1"] == "Cached" and states["gather step 2"] in ("Cached", "Completed"), states
    assert store.checkpoint_steps() == [1, 2, 3]
    assert sorted(summary.trained_steps) == [s for s in (1, 2, 3) if s not in done_before]
    steps_trained = [r["step"] for r in history(cfg.storage_url, cfg) if "train/reward" in r]
    assert sorted(steps_trained) == [1, 2, 3], f"each step trained exactly once, got {steps_trained}"
    after = s3_objects(cfg.storage_url)
    kept = [k for k in before if "/trajectories/" in k or any(f"/checkpoints/{s:04d}/" in k for s in done_before)]
    assert kept and all(after.get(k) == before[k] for k in kept), "work finished before the kill was redone"


def test_unreachable_judge_fails_first_scoring_clearly_and_keeps_trajectories(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint, monkeypatch
):
    from art_pipeline.tasks import JudgeError

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    judge = {"model": "hosted_vllm/judge", "api_base": "http://127.0.0.1:9/v1", "max_retries": 0, "timeout_s": 5}
    # Free-text moves, so a group's rollouts differ: RULER asks no judge about a group of identical ones.
    cfg = run_config(
        tiny_model_path,
        str(tmp_path / "art"),
        vllm_endpoint.base_url,
        name="judged",
        judge=judge,
        steps=1,
        eval_every=0,
        environment={"name": "tic-tac-toe"},
    )
    with pytest.raises(JudgeError) as e:
        run_flow(cfg)
    message = str(e.value)
    assert "judge" in message and "127.0.0.1:9" in message and "kept at" in message
    kept = tmp_path / "art" / "pipe" / "models" / "judged" / "trajectories" / "train" / "0000.jsonl"
    assert kept.exists() and str(kept) in message
    assert len([line for line in kept.read_text().splitlines() if line.strip()]) == cfg.groups_per_step
    assert not (kept.parent.parent.parent / "checkpoints").exists(), "nothing may be trained on unscored groups"

    # A judge without a key: the kept rollouts come from the cache, and the message says which key is missing.
    for var in ("ART_JUDGE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    before = kept.stat().st_mtime_ns
    no_key = cfg.model_copy(
        update={"judge": cfg.judge.model_copy(update={"model": "openai/gpt-4o-mini", "api_base": None})}
    )
    with pytest.raises(JudgeError, match="ART_JUDGE_API_KEY") as e:
        run_flow(no_key)
    assert "api_key" in str(e.value).lower() and kept.stat().st_mtime_ns == before


def test_ruler_judge_rescores_the_groups_the_step_trains_on(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint, monkeypatch
):
    """The session's vLLM server judges (a random model under RULER's JSON schema, so scores are valid)."""
    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    monkeypatch.setenv("ART_JUDGE_API_KEY", vllm_endpoint.api_key or "")
    judge = {
        "model": f"openai/{vllm_endpoint.model}",
        "api_base": vllm_endpoint.base_url,
        "max_retries": 4,
        "explanation_max_chars": 40,
        "litellm_params": {"temperature": 1.0, "max_tokens": 2000},
    }
    cfg = run_config(
        tiny_model_path, str(tmp_path / "art"), vllm_endpoint.base_url, name="ruled", judge=judge, steps=1, eval_every=0
    )
    summary, _ = run_flow(cfg)
    from art_core.storage import Storage

    storage = Storage(cfg.storage_url)
    scored = ModelStore(storage, "pipe", "ruled").read_groups(ModelStore(storage, "pipe", "ruled").scored("train", 0))
    rewards = [t.reward for g in scored for t in g.trajectories]
    assert len(rewards) == cfg.groups_per_step * cfg.group_size
    assert all(t.metrics["ruler_score"] == t.reward and "independent_reward" in t.metrics for g in scored for t in g)
    assert summary.rewards[1] == pytest.approx(sum(rewards) / len(rewards))
    assert summary.trained_steps == [1]


def _vllm_requests(server) -> float:
    """Chat requests the vLLM server has finished so far (its Prometheus counter)."""
    import httpx

    text = httpx.get(f"{server.root_url}/metrics", headers=server.headers(), timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:request_success_total")
    )


def _wait_for_object(url: str, proc: subprocess.Popen, timeout: float) -> None:
    """Poll storage until the object at `url` exists (written whole: S3 has no half objects)."""
    import s3fs

    fs = s3fs.S3FileSystem()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the flow process exited (code {proc.returncode}) before {url} was written")
        fs.invalidate_cache()
        if fs.exists(url):
            return
        time.sleep(0.05)
    raise AssertionError(f"{url} was not written within {timeout} s")


def test_evaluate_flow_compares_steps_with_the_base_model(trained):
    from art_pipeline.flows.config import EvaluateConfig
    from art_pipeline.flows.evaluate import evaluate_flow

    cfg, _, _, _ = trained
    reports = evaluate_flow(EvaluateConfig(run=cfg, steps=[3], baseline_step=0))
    assert [r.step for r in reports] == [0, 3]
    for r in reports:
        assert r.split == "val" and r.scenarios == 2 and r.trials == 2
        assert set(r.pass_k) == {1, 2} and 0.0 <= r.pass_k[2] <= r.pass_k[1] <= 1.0
    assert reports[1].reward == pytest.approx(trained[1].evaluations[3])  # step 3 came from the train run's cache
    from art_core.storage import Storage

    md = Storage(cfg.storage_url).read_text(f"{cfg.storage_url}/pipe/models/agent/reports/eval-compare.md")
    assert "(baseline)" in md and "pass^2" in md and "agent@3" in md


def test_evaluating_steps_on_the_train_split_keeps_what_the_run_wrote(trained):
    """Steps 2 and 3 evaluated on train after the run: the run's val report of step 3, the rollouts step 2
    gathered and trained checkpoint 3 on, and step 2's train record all stay as they were (the curves, the model
    card, a resume and a fork read them); the evaluation is kept beside them."""
    from art_core.store import ModelStore
    from art_pipeline.flows.config import EvaluateConfig
    from art_pipeline.flows.evaluate import evaluate_flow

    cfg, summary, _, _ = trained
    store = ModelStore(cfg.storage_url, cfg.project, cfg.model)
    gathered = store.storage.read_text(store.trajectories("train", 2))
    trained_record = store.step_metrics(2, "train/")
    on_train = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"split": "train"})})
    reports = evaluate_flow(EvaluateConfig(run=on_train, steps=[2, 3], baseline_step=None))
    assert [(r.split, r.step) for r in reports] == [("train", 2), ("train", 3)]
    val = store.read_eval(3)
    assert val["split"] == "val" and val["reward"] == pytest.approx(summary.evaluations[3])
    assert store.read_eval(3, "train")["split"] == "train"
    assert {r["split"] for r in store.read_evals()} == {"val"}
    assert store.storage.read_text(store.trajectories("train", 2)) == gathered
    assert trained_record and store.step_metrics(2, "train/") == trained_record
    assert len(store.read_groups(store.trajectories("eval-train", 3))) == cfg.eval.scenarios
    assert store.step_metrics(3, "eval-train/")["eval-train/reward"] == pytest.approx(reports[1].reward)


def test_evaluate_flow_takes_a_prompted_model_as_baseline(trained, vllm_endpoint, monkeypatch):
    """Any model behind an OpenAI-compatible URL; here the base model on the session server, by its name."""
    from art_pipeline.flows.config import EvaluateConfig
    from art_pipeline.flows.evaluate import evaluate_flow

    cfg, _, _, _ = trained
    monkeypatch.setenv("ART_BASELINE_API_KEY", vllm_endpoint.api_key or "")
    reports = evaluate_flow(EvaluateConfig(run=cfg, steps=[3], baseline_model=vllm_endpoint.model))
    assert [r.model for r in reports] == [vllm_endpoint.model, "agent@3"]
    assert reports[0].scenarios == 2 and set(reports[0].pass_k) == {1, 2}
    assert s3_objects(f"{cfg.storage_url}/pipe/baselines/{vllm_endpoint.model}/eval-val.json")


def test_deploy_flow_exports_adapter_with_model_card(trained):
    from art_pipeline.flows.config import DeployConfig
    from art_pipeline.flows.deploy import deploy_flow

    cfg, _, _, _ = trained
    summary = deploy_flow(DeployConfig(run=cfg, step=3))
    files = {k.rsplit("/", 1)[-1] for k in s3_objects(summary.export_uri)}
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "export.json", "COMPLETE"} <= files
    assert not any(f.startswith("optimizer") for f in files), "trainer state must not ship with the adapter"
    from art_core.serving import server_lora_rank
    from art_core.storage import Storage

    card = Storage(cfg.storage_url).read_text(f"{summary.export_uri}/README.md")
    assert "agent (step 3)" in card and "train/reward" in card and "--lora-modules agent=" in card
    rank = json.loads(Storage(cfg.storage_url).read_text(f"{summary.export_uri}/adapter_config.json"))["r"]
    assert f"--max-lora-rank {server_lora_rank(rank)} " in card, "the card's command must serve this adapter's rank"
    assert "--step 3" in summary.serve_command


def test_retrain_keeps_the_promoted_step_when_the_new_one_is_not_better(trained):
    from art_core.deploy import read_promoted
    from art_core.storage import Storage
    from art_pipeline.flows.config import RetrainConfig
    from art_pipeline.flows.retrain import retrain

    cfg, _, _, _ = trained
    storage = Storage(cfg.storage_url)
    store = ModelStore(storage, cfg.project, cfg.model)
    # No reward can beat another by more than 1.0 (rewards are in [0, 1]): the old step must stay.
    summary = retrain(RetrainConfig(run=cfg, extra_steps=1, min_improvement=1.0))
    assert summary.new_step == 4 and store.checkpoint_steps() == [1, 2, 3, 4]
    assert not summary.promoted and summary.promoted_step == 3
    assert summary.message.startswith("kept step 3")
    assert read_promoted(storage, cfg.project, cfg.model)["step"] == 3
    new_records = [r for r in history(cfg.storage_url, cfg) if r["step"] == 4 and "train/reward" in r]
    assert len(new_records) == 1


def test_lost_cache_still_neither_rolls_out_nor_trains_finished_steps(trained, vllm_server):
    """A new result store (or new code, which changes the task source) misses the cache; checkpoints still rule.

    Runs after the other tests of the shared run: it deletes that run's cached results."""
    import s3fs

    cfg, first, _, objects_before = trained
    s3fs.S3FileSystem().rm(f"{cfg.storage_url}/.prefect/results", recursive=True)
    requests_before = _vllm_requests(vllm_server)
    summary, run_id = run_flow(cfg.model_copy(update={"eval_every": 0}))
    assert summary.trained_steps == [] and summary.rewards == first.rewards
    assert (
        task_states(run_id, expect=["gather step 3"])["gather step 3"] == "Completed"
    )  # ran, but found step 3 trained on its file
    assert _vllm_requests(vllm_server) == requests_before
    after = s3_objects(cfg.storage_url)
    assert all(after.get(k) == etag for k, etag in objects_before.items() if "/trajectories/train/" in k)


@pytest.mark.filterwarnings("ignore:Logger 'prefect.task_runs' attempted to send logs")  # a task called outside a flow
def test_gather_reuses_its_own_rollouts_when_the_cache_record_is_missing(
    prefect_api, tmp_path, tiny_model_path, vllm_server, monkeypatch
):
    """The window a SIGKILL can hit: rollouts written, Prefect's cache record not yet committed."""
    import shutil

    from art_pipeline.flows.train import checkpoint_fingerprint_of, refs
    from art_pipeline.tasks import gather_trajectories, result_storage_for

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_server.api_key or "")
    cfg = run_config(tiny_model_path, str(tmp_path / "art"), vllm_server.base_url, name="window")
    ref, rollout = refs(cfg)
    gather = gather_trajectories.with_options(result_storage=result_storage_for(cfg.storage_url))
    first = gather(ref, rollout, 0, checkpoint_fingerprint_of(ref, 0), cfg.inference_url)
    written = os.stat(first.uri).st_mtime_ns
    shutil.rmtree(tmp_path / "art" / ".prefect")  # the cache record is gone, the rollouts are not
    requests = _vllm_requests(vllm_server)
    again = gather(ref, rollout, 0, checkpoint_fingerprint_of(ref, 0), cfg.inference_url)
    assert again.uri == first.uri and again.summary == first.summary
    assert os.stat(first.uri).st_mtime_ns == written and _vllm_requests(vllm_server) == requests
    other = rollout.model_copy(update={"seed": 1})  # different inputs: rolled out anew, not reused
    gather(ref, other, 0, checkpoint_fingerprint_of(ref, 0), cfg.inference_url)
    assert _vllm_requests(vllm_server) > requests
