"""The evaluation a do-nothing policy cannot pass, through both doors, on retail: the library's `evaluate_model`
and the evaluate flow's artifact both lead with pass^1 on tasks that need a write, report each category, and
the flow shows the never-acts policy (the floor) and the expert (the ceiling under the same max_turns) beside the
base model on the same scenarios.

The model is the tiny random one on the session's vLLM server: its numbers are a random model's; what is
tested is that the categories and the headline reach the result and the artifact.
"""

from __future__ import annotations

import asyncio

import pytest


def _artifact(key: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert found, f"no artifact {key!r}"
    return found[-1]


@pytest.mark.vllm
def test_both_doors_lead_with_write_pass_1_next_to_never_acts(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint, monkeypatch
):
    from art_core.envs import load_environment
    from art_core.evaluate import evaluate_model
    from art_core.serving import Endpoint
    from art_core.storage import Storage
    from art_pipeline.flows.config import EnvironmentConfig, EvalConfig, EvaluateConfig, RunConfig, SamplingConfig
    from art_pipeline.flows.evaluate import evaluate_flow
    from art_pipeline.flows.reporting import artifact_key

    ep = vllm_endpoint
    options = {"max_turns": 2}  # the first 3 val scenarios: a refusal, then two writes
    sampling = {"temperature": 1.0, "max_tokens": 24}

    # the library: a served model's evaluation carries the categories and the headline
    endpoint = Endpoint(base_url=ep.base_url, api_key=ep.api_key, base_name=ep.model)
    env = load_environment("retail", **options)
    library, _ = asyncio.run(
        evaluate_model(env, endpoint, ep.model, step=0, split="val", scenarios=3, trials=2, sampling=sampling)
    )
    assert list(library.by_category) == ["write", "refuse"]
    assert library.by_category["write"].scenarios == 2 and set(library.by_category["write"].pass_k) == {1, 2}
    assert library.headline.metric == "write pass^1"
    assert library.headline.value == library.by_category["write"].pass_k[1]

    # the flow: the same report from the Prefect task, the never-acts baseline beside it, the headline in the artifact
    monkeypatch.setenv("ART_BASELINE_API_KEY", ep.api_key or "none")
    run = RunConfig(
        project="cs",
        model="agent",
        base_model=tiny_model_path,
        environment=EnvironmentConfig(name="retail", options=options),
        eval=EvalConfig(split="val", scenarios=3, trials=2),
        sampling=SamplingConfig(**sampling),
        storage_url=str(tmp_path / "store"),
        inference_url=ep.base_url,
        report_to_wandb=False,
    )
    (flow,) = evaluate_flow(EvaluateConfig(run=run, baseline_model=ep.model, prompted_only=True))
    assert flow.headline.metric == "write pass^1" and list(flow.by_category) == ["write", "refuse"]

    md = _artifact(artifact_key("cs", "agent", "eval-compare")).data
    assert "Headline: **write pass^1**" in md and "| write pass^1 | reward |" in md
    row = f"| {ep.model} | 0 | val | 3 x 2 | **{flow.headline.figure().replace(' ', '** ', 1)}"  # best (only) row
    assert row in md and flow.headline.stderr is not None  # 2 write tasks: the error across them is shown
    assert "| never-acts (baseline) | - | val | 3 x 2 | 0.000 ± 0.000 |" in md
    assert "| never-acts (baseline) | write | 2 | 0.000 | 0.000 | 0.000 |" in md
    assert "| never-acts (baseline) | refuse | 1 | 1.000 | 1.000 | 1.000 |" in md
    # the ceiling: the expert under the same max_turns (2: too few for its writes), stored beside never-acts
    assert "| expert (baseline) | - | val | 3 x 2 | 0.000 ± 0.000 |" in md
    # which writes the two write tasks need, in both doors, with tries right per kind in the report
    assert flow.by_kind.keys() == library.by_kind.keys() and sum(k.scenarios for k in flow.by_kind.values()) == 2
    assert f"| kind | tasks | never-acts (baseline) | expert (baseline) | {ep.model} |" in md
    storage = Storage(run.storage_url)
    assert storage.read_text(f"{run.storage_url}/cs/models/agent/reports/eval-compare.md") == md
    never = storage.read_json(f"{run.storage_url}/cs/baselines/never-acts-retail/eval-val.json")
    assert never["headline"] == {"metric": "write pass^1", "value": 0.0, "stderr": 0.0, "with_yes": 0.0}
    assert storage.read_json(f"{run.storage_url}/cs/baselines/expert-retail/eval-val.json")["model"] == "expert"
    # consent is counted the same through both doors, and shown beside the headline
    assert library.headline.with_yes is not None and flow.headline.with_yes is not None
    assert "| pass^1 with yes | unasked |" in md
