"""Auto-captured trajectories (ART's `art.trajectory`, `current_trajectory`, `no_capture`, ...): a rollout that
only makes OpenAI calls trains through LocalBackend, with no Trajectory built by hand."""

from __future__ import annotations

import pytest

import art_core as art
from art_core.training.tokenize import tokenize_histories


async def rollout(model: art.TrainableModel, i: int) -> None:
    """ART 2026 style: plain chat completions; the reward goes on the captured trajectory."""
    client = model.openai_client()
    name = model.get_inference_name()
    messages = [{"role": "user", "content": f"Count to {i}."}]
    first = await client.chat.completions.create(model=name, messages=messages, max_completion_tokens=6)
    messages += [first.choices[0].message, {"role": "user", "content": "Again."}]
    second = await client.chat.completions.create(model=name, messages=messages, max_completion_tokens=6)
    with art.no_capture():  # a judge's call: not part of what the agent did
        await client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Judge it."}], max_completion_tokens=2
        )
    # A sub-agent's own conversation lands beside the main one.
    await client.chat.completions.create(
        model=name,
        messages=[{"role": "system", "content": "You summarise."}, {"role": "user", "content": "Summarise."}],
        max_completion_tokens=4,
    )
    text = (first.choices[0].message.content or "") + (second.choices[0].message.content or "")
    art.current_trajectory(required=True).reward = len(set(text)) / 20


@pytest.mark.vllm
async def test_an_art_style_rollout_is_captured_and_trains(vllm_server, tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    from art_core.local import LocalBackend

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server)
    model = art.TrainableModel(name="captured", project="capture", base_model=tiny_model_path)
    await model.register(backend)
    groups = await art.gather_trajectory_groups(
        [art.trajectory_group(art.trajectory(rollout(model, i)) for _ in range(4)) for i in (2, 3)], pbar_desc=None
    )
    for group in groups:
        assert len(group.trajectories) == 4
        for t in group.trajectories:
            roles = [m["role"] if isinstance(m, dict) else "choice" for m in t.messages_and_choices]
            assert roles == ["user", "choice", "user", "choice"]  # the judge's call is not there
            assert len(t.additional_histories) == 1
            sampled = [
                [m for m in h.messages_and_choices if not isinstance(m, dict)] for h in (t, *t.additional_histories)
            ]
            assert [len(c) for c in sampled] == [2, 1]
            seqs = tokenize_histories(t, tokenizer)  # sampled ids and logprobs came back with each Choice
            assert [s.num_trainable for s in seqs] == [sum(len(c.logprobs.content) for c in h) for h in sampled]
    result = await backend.train(model, groups, learning_rate=1e-3)
    assert result.step == 1 and result.metrics["trained_trajectories"] > 0
    await backend.close()


async def test_capture_names_outside_and_yielded():
    assert art.current_trajectory() is None
    with pytest.raises(RuntimeError, match="inside `await art.trajectory"):
        art.current_trajectory(required=True)

    async def hand_built() -> None:
        art.yield_trajectory(art.Trajectory(messages_and_choices=[{"role": "user", "content": "x"}], reward=0.5))

    assert (await art.capture_yielded_trajectory(hand_built())).reward == 0.5

    async def sets_reward() -> None:
        art.current_trajectory(required=True).reward = 2.0

    captured = await art.trajectory(sets_reward())
    assert captured.reward == 2.0 and captured.messages_and_choices == [] and "duration" in captured.metrics
    with pytest.deprecated_call():
        assert (await art.capture_auto_trajectory(sets_reward())).reward == 2.0
    with pytest.raises(TypeError, match="coroutine"):
        art.trajectory(sets_reward)
