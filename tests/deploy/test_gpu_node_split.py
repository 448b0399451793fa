"""How the SkyPilot GPU node (deployments/gpu-node.sky.yaml) splits its GPUs between the vLLM replica and the
Prefect worker whose flow runs are the train steps: its own `run` script, executed by bash with stand-ins for
nvidia-smi, prefect and python on PATH that record what they were started with.

With `--gpus H100:8` the replica gets GPU 0 and every train step the other 7 (so `TrainConfig.ranks` up to 7);
with one GPU both share it. With ART_TRAIN_RANKS=N (scripts/launch-cluster.sh --train-ranks N) the worker gets
exactly N GPUs, after the replica's own one or sharing the first with it (ART_REPLICA_GPU=shared), and a node
with too few GPUs fails before anything starts. SkyPilot's own loader is checked in test_skypilot.py; this
needs no SkyPilot.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "deployments" / "gpu-node.sky.yaml"

# Each stand-in appends one JSON line: which program, its arguments, and the GPUs it was given. The two servers
# (the replica, the worker) then stay up until both have started, as real ones would: the script ends as soon as
# one of them ends, and a stand-in that exited at once could end it before the other one had started.
RECORDER = """#!/usr/bin/env python3
import json, os, sys, time
SERVERS = (["-m", "art_core.replica"], ["worker", "start"])
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps({"program": os.path.basename(sys.argv[0]), "args": sys.argv[1:],
                        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\\n")
deadline = time.monotonic() + 30
while sys.argv[1:3] in SERVERS and time.monotonic() < deadline:
    with open(os.environ["RECORD"]) as f:
        if sum(json.loads(line)["args"][:2] in SERVERS for line in f) == 2:
            break
    time.sleep(0.05)
"""


def run_node(tmp_path: Path, gpus: int, fails: bool = False, **envs: str) -> tuple[list[dict], str]:
    """The task's `run` script on a node with `gpus` GPUs and the task's `envs`; what each program was started
    with, and the script's stderr."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("prefect", "python"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/sh\n" + "".join(f"echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})'\n" for i in range(gpus))
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "activate").write_text("")  # the node's venv: PATH stays ours
    record = tmp_path / "record.jsonl"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "RECORD": str(record),
        "ART_BASE_MODEL": "Qwen/Qwen2.5-7B-Instruct",
        "ART_GPU_POOL": "art-gpu",
        "ART_REPLICA_ARGS": "",
        **envs,
    }
    script = yaml.safe_load(TASK.read_text())["run"]
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode != 0) == fails, proc.stderr[-2000:]
    records = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return records, proc.stderr


def started(records: list[dict]) -> tuple[dict, dict]:
    """The replica's and the worker's records."""
    replica = next(r for r in records if r["program"] == "python" and r["args"][:2] == ["-m", "art_core.replica"])
    worker = next(r for r in records if r["program"] == "prefect" and r["args"][:2] == ["worker", "start"])
    return replica, worker


@pytest.mark.skipif(os.name != "posix", reason="the node runs bash")
def test_eight_gpus_give_the_replica_one_and_each_train_step_seven(tmp_path):
    replica, worker = started(run_node(tmp_path, gpus=8)[0])
    assert replica["gpus"] == "0" and "--gpu-memory-utilization" in replica["args"]
    assert worker["gpus"] == "1,2,3,4,5,6,7"  # a flow run inherits it: TrainConfig.ranks may be up to 7
    assert worker["args"][worker["args"].index("--pool") + 1] == "art-gpu"


@pytest.mark.skipif(os.name != "posix", reason="the node runs bash")
def test_one_gpu_is_shared_by_the_replica_and_the_train_steps(tmp_path):
    replica, worker = started(run_node(tmp_path, gpus=1)[0])
    assert replica["gpus"] is None and worker["gpus"] is None  # both see the one GPU
    assert "--gpu-memory-utilization" not in replica["args"]  # the replica keeps its default share


@pytest.mark.skipif(os.name != "posix", reason="the node runs bash")
@pytest.mark.parametrize(
    "gpus, envs, replica_gpus, worker_gpus, idle",
    [
        (8, {"ART_TRAIN_RANKS": "7"}, "0", "1,2,3,4,5,6,7", None),  # --train-ranks 7: H100:8
        (8, {"ART_TRAIN_RANKS": "3", "ART_REPLICA_GPU": "own"}, "0", "1,2,3", "4 of this node's 8 GPUs stay idle"),
        (4, {"ART_TRAIN_RANKS": "4", "ART_REPLICA_GPU": "shared"}, "0", "0,1,2,3", None),  # --replica-shares
        (1, {"ART_TRAIN_RANKS": "1", "ART_REPLICA_GPU": "shared"}, "0", "0", None),
    ],
)
def test_train_ranks_give_the_worker_exactly_that_many_gpus(tmp_path, gpus, envs, replica_gpus, worker_gpus, idle):
    records, stderr = run_node(tmp_path, gpus=gpus, **envs)
    replica, worker = started(records)
    assert replica["gpus"] == replica_gpus and worker["gpus"] == worker_gpus
    # A GPU of its own: the replica takes most of it; shared, it keeps its default share for rank 0's step.
    own = envs.get("ART_REPLICA_GPU", "own") == "own"
    assert ("--gpu-memory-utilization" in replica["args"]) == own
    assert (idle in stderr) if idle else "idle" not in stderr


@pytest.mark.skipif(os.name != "posix", reason="the node runs bash")
@pytest.mark.parametrize(
    "gpus, envs, message",
    [
        (
            4,
            {"ART_TRAIN_RANKS": "7"},
            "train steps of 7 rank(s) and the replica's own GPU need 8 GPUs but this node "
            "has 4: launch with --gpus <type>:8 (scripts/launch-cluster.sh --train-ranks 7 does)",
        ),
        (7, {"ART_TRAIN_RANKS": "7"}, "need 8 GPUs but this node has 7"),  # the replica's GPU counts
        (3, {"ART_TRAIN_RANKS": "4", "ART_REPLICA_GPU": "shared"}, "need 4 GPUs but this node has 3"),
        (8, {"ART_TRAIN_RANKS": "seven"}, "ART_TRAIN_RANKS='seven' is not a whole number of GPUs"),
        (8, {"ART_TRAIN_RANKS": "0"}, "ART_TRAIN_RANKS='0' is not a whole number of GPUs"),
        (8, {"ART_TRAIN_RANKS": "2", "ART_REPLICA_GPU": "dedicated"}, "ART_REPLICA_GPU='dedicated' is not 'own'"),
    ],
)
def test_a_node_with_too_few_gpus_refuses_before_starting_anything(tmp_path, gpus, envs, message):
    records, stderr = run_node(tmp_path, gpus=gpus, fails=True, **envs)
    assert message in stderr and "sky down" in stderr, stderr
    assert records == []  # no pool created, nothing deployed, no replica, no worker
