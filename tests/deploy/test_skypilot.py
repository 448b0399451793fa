"""The SkyPilot GPU node (deployments/gpu-node.sky.yaml) and scripts/launch-cluster.sh, checked offline.

SkyPilot lives in .venv-sky (`make sky`; `make test` builds it): skypilot 0.14.1 pins click and uvicorn
below what Prefect and vLLM need here, so it is run as a subprocess from that venv, never imported.

What is checked with SkyPilot's own code: its task loader (`sky.Task.from_yaml_config`: the YAML schema,
the null envs a launch must be given, the secrets split into given and required) and the workdir check a
launch makes on the client; its launch-time refusal of required secrets nobody gave; and its CLI, which
parses every flag the script passes and the task with the given values before it contacts its API server.
For `--train-ranks N` the script's `sky launch` runs SkyPilot's own CLI up to the call that would send the
task to its API server, which reports the GPUs and envs the node would get instead.

What cannot be checked here: SkyPilot's dry run (`sky launch --dryrun`, the script's --dry-run). In 0.14
it runs on the API server, whose validation and optimizer need SkyPilot's catalog of instances and
accelerators, downloaded from GitHub at first use (no network here), and at least one cloud with working
credentials (`sky check`), which a test has no honest way to provide. So the dry run test stops where the
CLI hands the request to an API server that does not answer, after everything client-side has passed.
The setup and run sections themselves only run on a cloud GPU node.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "deployments" / "gpu-node.sky.yaml"
SCRIPT = ROOT / "scripts" / "launch-cluster.sh"
SKY_PY = ROOT / ".venv-sky" / "bin" / "python"
SKY = ROOT / ".venv-sky" / "bin" / "sky"

pytestmark = pytest.mark.skipif(
    not SKY.exists(), reason="no .venv-sky with SkyPilot: `make sky` builds it (`make test` does it first)"
)

REQUIRED_ENVS = {
    "ART_STORAGE_ROOT": "s3://art-bucket/runs",
    "PREFECT_API_URL": "https://prefect.example.com/api",
    "ART_BASE_MODEL": "Qwen/Qwen2.5-7B-Instruct",
}
REQUIRED_SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIA-test",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value-123",
    "ART_INFERENCE_API_KEY": "replica-key-456",
}

# Runs in .venv-sky: loads the task file the way `sky launch` does for each case, and reports what it got.
LOADER = r"""
import json, sys, yaml
import sky
from sky import dag as dag_lib, execution

out = []
for case in json.loads(sys.argv[2]):
    config = yaml.safe_load(open(sys.argv[1]))
    try:
        task = sky.Task.from_yaml_config(config, env_overrides=list(case["envs"].items()),
                                         secrets_overrides=list(case["secrets"].items()))
        task.expand_and_validate_workdir()
        task.expand_and_validate_file_mounts()
        dag = dag_lib.Dag()
        dag.add(task)
        try:  # what `sky launch` does with secrets that have no value: refuse before provisioning
            execution._resolve_managed_secrets(dag)
            secrets_error = None
        except RuntimeError as e:
            secrets_error = str(e)
        out.append({
            "name": task.name, "workdir": task.workdir, "setup": task.setup, "run": task.run, "envs": task.envs,
            "secrets": {k: v.get_secret_value() for k, v in task.secrets.items()},
            "required_secrets": sorted(r.name for r in task.managed_secret_refs), "secrets_error": secrets_error,
            "resources": [{"accelerators": r.accelerators, "ports": r.ports, "disk_size": r.disk_size}
                          for r in task.resources],
        })
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {e}"})
print(json.dumps(out))
"""


# Runs in .venv-sky as the `sky` the script calls: SkyPilot's CLI parses the script's flags and builds the task
# from the task file (its loader, then --gpus and --env applied); where the CLI would send that task to its API
# server (sdk.launch), this prints what the node would be launched with.
CLI_UNTIL_LAUNCH = r"""
import json, sys
from sky.client import sdk
from sky.client.cli import command

def launch(task, **kwargs):
    print("LAUNCH " + json.dumps({"accelerators": [r.accelerators for r in task.resources], "envs": task.envs}))
    sys.exit(0)

sdk.launch = launch
command.cli(sys.argv[1:], prog_name="sky")
"""


def sky_env(tmp_path: Path, api_port: int | None = None, **extra: str) -> dict[str, str]:
    """An environment for SkyPilot and the script: its state under tmp_path, no usage reports, no settings of ours."""
    env = {k: v for k, v in os.environ.items() if k not in {**REQUIRED_ENVS, **REQUIRED_SECRETS}}
    for key in (
        "AWS_ENDPOINT_URL",
        "AWS_DEFAULT_REGION",
        "PREFECT_API_KEY",
        "PREFECT_API_AUTH_STRING",
        "HF_TOKEN",
        "WANDB_API_KEY",
        "SKY",
    ):
        env.pop(key, None)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1")
    if api_port is not None:
        env["SKYPILOT_API_SERVER_ENDPOINT"] = f"http://127.0.0.1:{api_port}"
    env.update(extra)
    return env


def load_task(tmp_path: Path, cases: list[dict]) -> list[dict]:
    """SkyPilot's loader on the task file, once per case ({"envs": {...}, "secrets": {...}}), from the repo root."""
    proc = subprocess.run(
        [str(SKY_PY), "-c", LOADER, str(TASK), json.dumps(cases)],
        cwd=ROOT,
        env=sky_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict:
    """The task as SkyPilot loads it with every required value given."""
    (task,) = load_task(tmp_path_factory.mktemp("sky"), [{"envs": REQUIRED_ENVS, "secrets": REQUIRED_SECRETS}])
    assert "error" not in task, task
    return task


def test_task_asks_for_a_gpu_opens_the_replica_port_and_installs_the_project(full):
    accelerators = [r["accelerators"] for r in full["resources"]]
    assert {"H100": 1} in accelerators and all(a and sum(a.values()) >= 1 for a in accelerators)
    replica = re.search(
        r"python -m art_core\.replica --base-model \"\$ART_BASE_MODEL\" --host 0\.0\.0\.0 --port (\d+)", full["run"]
    )
    assert replica, full["run"]
    assert all(r["ports"] == [replica.group(1)] for r in full["resources"]), "the replica's port must be opened"
    assert all(r["disk_size"] >= 100 for r in full["resources"])
    # The checkout is the workdir (synced to the node) and setup installs it with the Makefile (vllm on CUDA).
    assert full["workdir"] == str(ROOT)
    assert re.search(r"^\s*make install\b", full["setup"], re.M), full["setup"]


def test_worker_polls_the_pool_of_the_gpu_train_step_deployment(full):
    assert full["envs"]["ART_GPU_POOL"] == "art-gpu"
    assert 'prefect worker start --pool "$ART_GPU_POOL"' in full["run"]
    deployed = re.search(r"prefect --no-prompt deploy --name (\S+) --prefect-file (\S+)", full["run"])
    assert deployed, full["run"]
    prefect_yaml = yaml.safe_load((ROOT / deployed.group(2)).read_text())
    (deployment,) = [d for d in prefect_yaml["deployments"] if d["name"] == deployed.group(1)]
    assert deployment["work_pool"]["name"] == "art-gpu"
    assert deployment["entrypoint"].startswith("flows/train_step.py:")
    # The replica and the worker both run in the job: either one ending ends it.
    assert re.search(r"^\s*wait -n\s*$", full["run"], re.M)


def test_setup_and_run_are_valid_bash(full, tmp_path):
    """SkyPilot runs both sections with bash on the node; a syntax error would show only after a billed setup."""
    for section in ("setup", "run"):
        script = tmp_path / f"{section}.sh"
        script.write_text(full[section])
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, (section, proc.stderr)


def test_storage_and_keys_reach_the_node_as_given(full):
    for key, value in REQUIRED_ENVS.items():
        assert full["envs"][key] == value
    for key, value in REQUIRED_SECRETS.items():
        assert full["secrets"][key] == value  # secrets, so SkyPilot redacts them from its logs
    assert full["required_secrets"] == [] and full["secrets_error"] is None
    optional = {"PREFECT_API_KEY", "PREFECT_API_AUTH_STRING", "HF_TOKEN", "WANDB_API_KEY"}
    assert all(full["secrets"][key] == "" for key in optional)  # optional: empty unless given
    assert full["envs"]["AWS_ENDPOINT_URL"] == ""


def test_launch_refuses_a_missing_required_value(tmp_path):
    cases = [
        {"envs": {k: v for k, v in REQUIRED_ENVS.items() if k != missing}, "secrets": REQUIRED_SECRETS}
        for missing in REQUIRED_ENVS
    ]
    cases.append({"envs": REQUIRED_ENVS, "secrets": {}})
    *env_cases, no_secrets = load_task(tmp_path, cases)
    for missing, got in zip(REQUIRED_ENVS, env_cases):
        assert got.get("error", "").startswith(f"ValueError: Environment variable '{missing}' is None"), got
    assert no_secrets["required_secrets"] == sorted(REQUIRED_SECRETS)
    assert "No value available for secret(s)" in no_secrets["secrets_error"]
    assert all(key in no_secrets["secrets_error"] for key in REQUIRED_SECRETS)


@pytest.fixture
def closed_port():
    """A loopback port bound but never listening: a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def run_script(tmp_path: Path, *args: str, trace: bool = False, api_port: int | None = None, **env: str):
    cmd = ["bash", "-x", str(SCRIPT), *args] if trace else [str(SCRIPT), *args]
    return subprocess.run(
        cmd, cwd=tmp_path, env=sky_env(tmp_path, api_port, **env), capture_output=True, text=True, timeout=300
    )


GOOD = {**REQUIRED_ENVS, **REQUIRED_SECRETS}


def test_help_names_every_required_setting_and_how_to_stop(tmp_path):
    proc = run_script(tmp_path, "--help")
    assert proc.returncode == 0
    words = ["--base-model", "--dry-run", "--max-hours", "--train-ranks", "--replica-shares", "sky down"]
    for word in [*words, *REQUIRED_ENVS, *REQUIRED_SECRETS]:
        assert word in proc.stdout, word


@pytest.mark.parametrize(
    "args, unset, changed, message",
    [
        ([], ["ART_BASE_MODEL"], {}, "no base model"),
        (["--base-model", "./.models/tiny"], [], {}, "is a path on this machine"),
        ([], ["ART_STORAGE_ROOT"], {}, "ART_STORAGE_ROOT is not set"),
        ([], [], {"ART_STORAGE_ROOT": "./.art"}, "is not on S3"),
        ([], [], {"ART_STORAGE_ROOT": "s3://"}, "is not on S3"),
        ([], ["PREFECT_API_URL"], {}, "PREFECT_API_URL is not set"),
        ([], [], {"PREFECT_API_URL": "http://127.0.0.1:4200/api"}, "loopback"),
        ([], [], {"PREFECT_API_URL": "prefect.example.com"}, "not an http(s) URL"),
        ([], ["AWS_SECRET_ACCESS_KEY"], {}, "AWS_SECRET_ACCESS_KEY is not set"),
        ([], ["ART_INFERENCE_API_KEY"], {}, "ART_INFERENCE_API_KEY is not set"),
        (["--name", "Art_GPU"], [], {}, "cluster name 'Art_GPU'"),
        (["--max-hours", "0"], [], {}, "--max-hours '0'"),
        (["--gpus"], [], {}, "--gpus needs a value"),
        (["--spot"], [], {}, "unknown argument '--spot'"),
        (["--train-ranks", "0"], [], {}, "--train-ranks '0' is not a whole number of GPUs"),
        (["--train-ranks", "2.5"], [], {}, "--train-ranks '2.5' is not a whole number of GPUs"),
        (["--train-ranks", "seven"], [], {}, "--train-ranks 'seven' is not a whole number of GPUs"),
        (["--train-ranks"], [], {}, "--train-ranks needs a value"),
        (["--train-ranks", "7", "--gpus", "H100:8"], [], {}, "--gpus and --train-ranks both set the node's GPUs"),
        (["--train-ranks", "7", "--gpu-type", "H100:8"], [], {}, "--gpu-type 'H100:8' is not a GPU type"),
        (["--gpu-type", "A100"], [], {}, "--gpu-type goes with --train-ranks N; without it give --gpus A100:COUNT"),
        (["--replica-shares"], [], {}, "--replica-shares goes with --train-ranks N"),
    ],
)
def test_script_refuses_bad_input_before_calling_sky(tmp_path, args, unset, changed, message):
    env = {k: v for k, v in {**GOOD, **changed}.items() if k not in unset}
    never_called = tmp_path / "sky-must-not-run"  # called, it would fail with 127 "No such file"
    proc = run_script(tmp_path, *args, SKY=str(never_called), **env)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "launch-cluster:" in proc.stderr
    assert "No such file" not in proc.stderr


def test_env_file_fills_only_what_the_environment_leaves_unset(tmp_path):
    (tmp_path / ".env").write_text("".join(f'{k}="{v}"\n' for k, v in GOOD.items()) + "ART_STORAGE_ROOT=\n")
    never_called = tmp_path / "sky-not-installed"
    # Everything from .env: the checks pass and the script goes on to call sky.
    proc = run_script(tmp_path, SKY=str(never_called))
    assert proc.returncode == 127 and str(never_called) in proc.stderr, proc.stderr
    # The environment wins over .env.
    proc = run_script(tmp_path, SKY=str(never_called), ART_STORAGE_ROOT="/data/art")
    assert proc.returncode == 2 and "ART_STORAGE_ROOT='/data/art' is not on S3" in proc.stderr


def test_dry_run_command_passes_skypilots_cli(tmp_path, closed_port):
    """--dry-run runs `sky launch --dryrun` with the script's flags. SkyPilot's CLI parses them and loads the task
    with the given envs and secrets before it contacts its API server; none answers here (see the module
    docstring), so the run stops there, after everything client-side has passed."""
    args = [
        "--base-model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--name",
        "art-gpu-test",
        "--gpus",
        "A100:1",
        "--infra",
        "aws",
        "--use-spot",
        "--max-hours",
        "2",
        "--replica-args",
        "--max-lora-rank 32",
        "--dry-run",
        "-y",
    ]
    env = {k: v for k, v in GOOD.items() if k != "ART_BASE_MODEL"}
    proc = run_script(
        tmp_path,
        *args,
        trace=True,
        api_port=closed_port,
        HF_TOKEN="hf-token-789",
        AWS_ENDPOINT_URL="https://minio.example.com",
        **env,
    )
    out = proc.stdout + proc.stderr
    (launch,) = [line for line in proc.stderr.splitlines() if line.startswith("+ ") and f"{SKY} launch" in line]
    for flag in [
        "launch -c art-gpu-test deployments/gpu-node.sky.yaml -d",
        "--gpus A100:1",
        "--infra aws",
        "--use-spot",
        "-i 120 --wait-for none --down",
        "--dryrun",
        "-y",
        "--env AWS_ENDPOINT_URL",
        "--secret HF_TOKEN",
        "--secret ART_INFERENCE_API_KEY",
    ]:
        assert flag in launch, (flag, launch)
    for secret in [*REQUIRED_SECRETS.values(), "hf-token-789"]:
        assert secret not in launch  # names only: SkyPilot reads the values from the environment
    assert f"Could not connect to SkyPilot API server at http://127.0.0.1:{closed_port}" in out, out[-3000:]
    assert proc.returncode != 0
    for rejection in ["No such option", "Invalid task YAML", "ValueError", "is None"]:
        assert rejection not in out, out[-3000:]


@pytest.mark.parametrize(
    "args, accelerators, envs",
    [
        # ART's dedicated mode: the replica's GPU and 7 for each train step.
        (["--train-ranks", "7"], [{"H100": 8}], {"ART_TRAIN_RANKS": "7", "ART_REPLICA_GPU": "own"}),
        (
            ["--train-ranks", "4", "--gpu-type", "A100-80GB", "--replica-shares"],
            [{"A100-80GB": 4}],
            {"ART_TRAIN_RANKS": "4", "ART_REPLICA_GPU": "shared"},
        ),
        # No ask: the task file's one GPU of either type, and the run script's split by count.
        ([], [{"H100": 1}, {"A100-80GB": 1}], {"ART_TRAIN_RANKS": "", "ART_REPLICA_GPU": "own"}),
    ],
)
def test_train_ranks_size_the_node_through_skypilots_cli(tmp_path, closed_port, args, accelerators, envs):
    """What `sky launch` would provision for the script's flags: SkyPilot's CLI and loader build the task, and
    the task's GPUs and the envs its run script splits them by are read where it would go to the API server."""
    (tmp_path / "cli.py").write_text(CLI_UNTIL_LAUNCH)
    sky = tmp_path / "sky"
    sky.write_text(f'#!/bin/sh\nexec "{SKY_PY}" "{tmp_path / "cli.py"}" "$@"\n')
    sky.chmod(0o755)
    proc = run_script(tmp_path, *args, "--dry-run", "-y", api_port=closed_port, SKY=str(sky), **GOOD)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("LAUNCH ")]
    task = json.loads(line.removeprefix("LAUNCH "))
    # The task file's two alternatives (H100 or A100-80GB) both take --gpus' type and count.
    assert {json.dumps(a) for a in task["accelerators"]} == {json.dumps(a) for a in accelerators}
    assert {k: task["envs"][k] for k in envs} == envs
    assert task["envs"]["ART_BASE_MODEL"] == GOOD["ART_BASE_MODEL"]
