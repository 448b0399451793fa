"""The deploy flow run from the `deploy` deployment's parameters in deployments/prefect.yaml, as the UI's form
fills them: its default target (merged), and Together with the key in a Prefect Secret block. The result
(target, step, endpoint) is the flow's artifact; the key is in neither the artifact nor the parameters."""

from __future__ import annotations

import os

import pytest
import yaml

from art_core.storage import Storage
from tests.deploy.conftest import ACCOUNT, write_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "tg-block-secret-42"


def _deploy_parameters(storage_url: str, base_model: str) -> dict:
    """The `deploy` deployment's parameters, with the run pointed at this test's storage and tiny model."""
    with open(os.path.join(REPO, "deployments", "prefect.yaml")) as f:
        (dep,) = [d for d in yaml.safe_load(f)["deployments"] if d["name"] == "deploy"]
    config = dep["parameters"]["config"]
    run = {"storage_url": storage_url, "base_model": base_model, "project": "flowproj", "model": "agent-001"}
    config["run"] = {**config["run"], **run}
    return config


def _artifact(key: str) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        (latest,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])), limit=1, sort="CREATED_DESC"
        )
    return latest.data


def test_deploy_flow_from_the_deployments_parameters(prefect_api, moto_s3, tiny_model_path, together_api, monkeypatch):
    from prefect.blocks.system import Secret

    from art_pipeline.flows.config import DeployConfig
    from art_pipeline.flows.deploy import deploy_flow
    from art_pipeline.flows.reporting import artifact_key

    storage = Storage(moto_s3)
    write_checkpoint(storage, "flowproj", "agent-001", 1, tiny_model_path)
    params = _deploy_parameters(moto_s3, tiny_model_path)
    assert params["deploy_to"] == "merged"  # the deployment's default: no key, no server needed

    merged = deploy_flow(DeployConfig.model_validate(params))
    uri = f"{moto_s3}/flowproj/models/agent-001/exports/0001-merged"
    assert (merged.target, merged.step, merged.status, merged.location) == ("merged", 1, "saved", uri)
    assert storage.is_complete(uri) and storage.exists(f"{uri}/model.safetensors")
    note = _artifact(artifact_key("flowproj", "agent-001", "deploy"))
    assert "| merged | 1 | - | `agent-001` | saved |" in note and uri in note

    # The form's fields a user changes for Together; the key lives in a Secret block, not in the environment.
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    Secret(value=KEY).save("together-deploy-test", overwrite=True)
    together_api.script = ["Complete"]  # ready at the first poll: the flow polls every 15 s (test_together polls)
    params.update(
        deploy_to="together", served_base_model="Qwen/Qwen2.5-72B-Instruct", api_key_block="together-deploy-test"
    )
    summary = deploy_flow(DeployConfig.model_validate(params))
    name = f"{ACCOUNT}/flowproj-agent-001-1"
    assert (summary.target, summary.step, summary.endpoint, summary.model_name, summary.status) == (
        "together",
        1,
        together_api.url,
        name,
        "ready",
    )
    assert {r["auth"] for r in together_api.requests} == {f"Bearer {KEY}"}
    assert together_api.requests[0]["body"]["base_model"] == "Qwen/Qwen2.5-72B-Instruct"
    note = _artifact(artifact_key("flowproj", "agent-001", "deploy"))
    assert f"| together | 1 | {together_api.url} | `{name}` | ready |" in note
    assert KEY not in note and KEY not in str(params) and KEY not in summary.model_dump_json()

    params["api_key_block"] = "no-such-block"
    with pytest.raises(ValueError, match="no Prefect Secret block named 'no-such-block'"):
        deploy_flow(DeployConfig.model_validate(params))

    params.update(deploy_to=None)  # the form's empty choice: export the adapter only, as before targets existed
    exported = deploy_flow(DeployConfig.model_validate(params))
    assert (exported.target, exported.export_uri) == (None, f"{moto_s3}/flowproj/models/agent-001/exports/0001")
    note = _artifact(artifact_key("flowproj", "agent-001", "deploy"))
    assert f"`{exported.export_uri}`" in note and "art_core.deploy.serve" in note
