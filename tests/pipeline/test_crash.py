"""SIGKILL of the train flow's process in each phase of a step: nothing it started survives, the re-run resumes.

A subprocess runs the train flow (2 tiny steps) with one engine function patched, in that process only,
to SIGKILL the process at one moment of step 2 after writing the ids of its descendants to a file:

    rollouts_written      step 2's rollouts are in storage; nothing scored or trained yet
    training              the trainer is called for step 2 (with its own vLLM and temporary Prefect server)
    marker_before_record  checkpoint 2 has its COMPLETE marker; its history record is not written yet
    after_record          checkpoint 2 and its history record are both written

Within 5 s of the kill none of those descendants may run. The re-run (in this process, on the session's
vLLM and Prefect server) must end with every checkpoint complete, exactly one train record per step
(step 2's backfilled from the checkpoint when the kill came before it) and step 2's rollouts reused.
Only the `training` phase pays for its own vLLM server and temporary Prefect server; the others talk to
the session's, so they show the resume, not the process cleanup.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from art_pipeline.flows.config import RunConfig
from tests.pipeline.test_train_flow import run_config

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KILLED_RUN = '''
import json, os, signal, sys
import psutil
from art_core.store import ModelStore
from art_pipeline.flows.config import RunConfig
from art_pipeline.flows.train import train

phase, config_json, pids_path = sys.argv[1:4]


def die():
    """Write our descendants (what must not outlive us), then SIGKILL ourselves: no cleanup runs."""
    procs = []
    for p in psutil.Process().children(recursive=True):
        try:
            procs.append({"pid": p.pid, "created": p.create_time(), "name": p.name(), "cmdline": " ".join(p.cmdline())})
        except psutil.NoSuchProcess:
            pass
    with open(pids_path + ".tmp", "w") as f:
        json.dump(procs, f)
    os.replace(pids_path + ".tmp", pids_path)
    os.kill(os.getpid(), signal.SIGKILL)


if phase == "rollouts_written":
    write_groups = ModelStore.write_groups

    def patched(self, uri, groups):
        n = write_groups(self, uri, groups)
        if uri.endswith("/trajectories/train/0001.jsonl"):
            die()
        return n

    ModelStore.write_groups = patched
elif phase == "training":
    import art_core.training.trainer as trainer

    real_train = trainer.train_grpo_step

    def patched(*args, **kwargs):
        if kwargs.get("step") == 1:
            die()
        return real_train(*args, **kwargs)

    trainer.train_grpo_step = patched
else:
    record = ModelStore.record

    def patched(self, step, metrics, prefix="train/"):
        if phase == "marker_before_record" and prefix == "train/" and step == 2:
            die()
        out = record(self, step, metrics, prefix)
        if phase == "after_record" and prefix == "train/" and step == 2:
            die()
        return out

    ModelStore.record = patched

train(RunConfig.model_validate_json(config_json))
print("the flow finished without reaching the kill", flush=True)
'''


def _config(model_path: str, storage_url: str, inference_url: str | None) -> RunConfig:
    return run_config(model_path, storage_url, inference_url, project="crash", steps=2, eval_every=0)


def _running(entry: dict) -> bool:
    """The process `entry` describes still runs (a zombie, or another process under a reused id, does not)."""
    try:
        p = psutil.Process(entry["pid"])
        return p.create_time() == entry["created"] and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _digest(path: str) -> tuple[int, str]:
    with open(path, "rb") as f:
        return os.stat(path).st_mtime_ns, hashlib.sha256(f.read()).hexdigest()


def _checkpoint_files(store, step: int) -> dict[str, tuple[int, str]]:
    root = store.checkpoint(step)
    return {
        os.path.relpath(os.path.join(d, n), root): _digest(os.path.join(d, n))
        for d, _, names in os.walk(root)
        for n in names
    }


def _train_records(store) -> dict[int, int]:
    counts: dict[int, int] = {}
    for rec in store.read_history():
        if any(k.startswith("train/") for k in rec):
            counts[rec["step"]] = counts.get(rec["step"], 0) + 1
    return counts


@pytest.mark.parametrize("phase", ["rollouts_written", "training", "marker_before_record", "after_record"])
def test_sigkill_in_each_phase_leaves_no_process_and_the_rerun_resumes(
    phase, prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch
):
    from art_core.store import ModelStore

    own = phase == "training"  # this run starts its own vLLM server and a temporary Prefect server
    cfg = _config(tiny_model_path, str(tmp_path / "store"), None if own else vllm_endpoint.base_url)
    env = {k: v for k, v in os.environ.items() if not (own and k.startswith(("PREFECT_API_", "ART_INFERENCE_API_KEY")))}
    if own:  # a Prefect database of its own, never the developer's ~/.prefect
        env["PREFECT_HOME"] = str(tmp_path / "prefect")
        # Prefect gives its temporary server 20 s to answer; a CI machine busy with the other worker's tests
        # needed more (CI, stop 19: "Timed out while attempting to connect to ephemeral Prefect API server").
        env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
    else:
        env.update(PREFECT_API_URL=prefect_api, ART_INFERENCE_API_KEY=vllm_endpoint.api_key or "")
    pids_path, log_path = str(tmp_path / "descendants.json"), tmp_path / "killed-run.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, phase, cfg.model_dump_json(), pids_path],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -9 and os.path.exists(pids_path), log_path.read_text()[-3000:]

    # Nothing the killed run started outlives it by 5 s.
    t0 = time.monotonic()
    descendants = json.load(open(pids_path))
    try:
        while any(_running(e) for e in descendants) and time.monotonic() - t0 < 5.0:
            time.sleep(0.05)
        left = [f"{e['pid']} {e['name']}: {e['cmdline'][:80]}" for e in descendants if _running(e)]
        assert left == [], f"outlived the killed flow by 5 s: {left}"
    finally:
        for e in descendants:  # only when the test failed: leave nothing behind (by id)
            if _running(e):
                psutil.Process(e["pid"]).kill()
    if own:  # the phase that had them shows both kinds of server died
        names = " ".join(f"{e['name']} {e['cmdline']}" for e in descendants)
        assert "VLLM::EngineCore" in names and "prefect.server.api.server:create_app" in names, names

    # What the kill left: step 2's rollouts always; checkpoint 2 only from the marker on.
    store = ModelStore(cfg.storage_url, cfg.project, cfg.model)
    rollouts = store.trajectories("train", 1)
    rollouts_before = _digest(rollouts)
    marked = phase in ("marker_before_record", "after_record")
    assert store.is_complete(2) == marked
    assert bool(store.step_metrics(2, "train/")) == (phase == "after_record")
    checkpoint_before = _checkpoint_files(store, 2) if marked else {}

    # The re-run, on the session's server and Prefect API.
    from art_pipeline.flows.train import train

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    summary = train(cfg.model_copy(update={"inference_url": vllm_endpoint.base_url}))

    assert store.checkpoint_steps() == [1, 2]
    assert _train_records(store) == {1: 1, 2: 1}, store.read_history()
    assert _digest(rollouts) == rollouts_before  # step 2's rollouts reused, not rolled out again
    assert summary.trained_steps == ([] if marked else [2])
    if marked:
        assert _checkpoint_files(store, 2) == checkpoint_before  # not trained again
    backfilled = store.step_metrics(2, "train/").get("train/backfilled")
    assert backfilled == (1.0 if phase == "marker_before_record" else None)
