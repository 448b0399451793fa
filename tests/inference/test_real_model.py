"""A real pretrained model through real vLLM: SmolLM2-135M-Instruct (the registry's GGUF, converted) is served,
rolled out on the word quiz and the price lookup (a real tool call through the hermes template and parser),
trained one step, and the new adapter answers with changed logprobs."""

from __future__ import annotations

import json

import pytest

import art_core as art

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


async def _logprob_of(client, model: str, prompt: str, reply: str) -> float:
    """Sum of the logprobs the served `model` gives `reply` after `prompt` (vLLM prompt_logprobs)."""
    r = await client.completions.create(
        model=model, prompt=prompt + reply, max_tokens=1, temperature=0.0, extra_body={"prompt_logprobs": 0}
    )
    scored = r.choices[0].model_extra["prompt_logprobs"]
    n = len(r.choices[0].model_extra.get("prompt_token_ids") or []) or len(scored)
    tail = [next(iter(d.values()))["logprob"] for d in scored[n - 4 :] if d]  # the reply's last tokens
    return sum(tail)


async def test_smollm2_rolls_out_trains_a_step_and_the_new_adapter_answers(smollm2_path, tmp_path):
    from art_core.envs import load_environment
    from art_core.local_backend import LocalBackend

    quiz, lookup = load_environment("word-quiz"), load_environment("price-lookup")
    backend = LocalBackend(
        path=str(tmp_path / "art"),
        cache_dir=str(tmp_path / "cache"),
        server_config={"seed": 0, "log_path": str(tmp_path / "vllm.log")},
    )
    model = art.TrainableModel(name="smol", project="real", base_model=smollm2_path)
    try:
        await model.register(backend)
        server = backend.server_for(model)
        if "--dtype" in server.command():  # on a CPU without bf16 the server runs float32 (ServerOptions)
            assert server.command()[server.command().index("--dtype") + 1] in ("float32", "bfloat16")
        client = model.openai_client()
        questions = quiz.scenarios("train")[:2]
        groups = await art.gather_trajectory_groups(
            (
                art.TrajectoryGroup(
                    quiz.rollout(client, model.get_inference_name(), q, max_tokens=12, temperature=0.7)
                    for _ in range(4)
                )
                for q in questions
            ),
            pbar_desc=None,
        )
        assert sum(len(g) for g in groups) == 8
        for g in groups:
            for t in g.trajectories:
                assert t.messages_and_choices[-1].logprobs.content[0].token.startswith("token_id:")

        # A real multi-turn tool episode: the call goes through the tool-aware template and vLLM's hermes parser.
        episode = await lookup.rollout(
            client, model.get_inference_name(), lookup.scenarios("val")[0], max_tokens=32, temperature=0.7
        )
        messages = episode.messages()
        assert messages[1]["tool_calls"][0]["function"]["name"] == "lookup_price"
        assert json.loads(messages[2]["content"]).get("price", "").startswith("$")

        # This test checks the mechanics of a step on the real model (bench/real_model.py measures learning): a
        # group whose rollouts happened to score alike has no advantage and trains nothing, so give it one.
        for g in groups:
            if len(set(g.rewards())) == 1:
                g.trajectories[0].reward = 1.0 - g.trajectories[0].reward
        prompt = "<|im_start|>user\nWhich of these words is a fruit: lamp, pear, door, cloud?<|im_end|>\n<|im_start|>assistant\n"
        before = await _logprob_of(client, "smol@0", prompt, "Pear.")
        result = await model.train(groups, art.TrainConfig(learning_rate=5e-3, seed=0))
        assert result.step == 1 and await model.get_step() == 1
        assert model.get_inference_name() == "smol@1"
        reply = await client.chat.completions.create(
            model=model.get_inference_name(),
            max_tokens=8,
            temperature=0.0,
            messages=[{"role": "user", "content": "Name a color."}],
        )
        assert reply.choices[0].message.content  # the trained adapter answers
        after = await _logprob_of(client, model.get_inference_name(), prompt, "Pear.")
        assert after != pytest.approx(before, abs=1e-4), "the trained adapter scores the same text as the base model"
    finally:
        await backend.close()
