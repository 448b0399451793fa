"""deploy_model("vllm") without a running server starts one of its own (art_core.deploy.serve, also
`python -m art_core.deploy.serve` and the tau2 evaluation's --storage) that answers to the model's name with the
adapter applied and to the base model's name without it. On CPU our servers swap merged weights instead of running
vLLM's LoRA by default; a server that loads a named adapter must run LoRA, or vLLM refuses at start."""

from __future__ import annotations

import pytest

from art_core.deploy import deploy_model
from art_core.serving import Endpoint, base_served_name
from art_core.storage import Storage
from art_core.store import ModelRef
from tests.deploy.conftest import write_checkpoint

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one server start of its own


async def test_a_deployment_serves_the_adapter_under_the_models_name(tiny_model_path, tmp_path):
    storage = Storage(str(tmp_path / "art"))
    write_checkpoint(storage, "proj", "served-agent", 1, tiny_model_path, seed=3)
    ref = ModelRef(storage_url=storage.root, project="proj", model="served-agent", base_model=tiny_model_path)
    d = await deploy_model("vllm", ref, 1)
    server = d._server
    try:
        assert (d.status, d.model_name) == ("serving", "served-agent")
        messages = [{"role": "user", "content": "Where is my order 1234?"}]
        answers = {}
        async with Endpoint.of(server).client() as client:
            assert {m.id for m in (await client.models.list()).data} >= {"served-agent"}
            for model in ("served-agent", base_served_name(tiny_model_path)):
                r = await client.chat.completions.create(
                    model=model, messages=messages, temperature=0, max_tokens=8, extra_body={"ignore_eos": True}
                )
                answers[model] = r.choices[0].message.content
        assert answers["served-agent"] != answers[base_served_name(tiny_model_path)]  # the adapter is applied
    finally:
        d.stop()
    assert not server.is_alive()
