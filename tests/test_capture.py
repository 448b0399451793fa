"""Auto-captured trajectories (ART's `art.trajectory`, `current_trajectory`, `no_capture`, ...): a rollout that
only makes OpenAI calls trains through LocalBackend, with no Trajectory built by hand; streamed calls are
recorded ready to train, or refused when the server streamed fewer sampled tokens than it counted."""

from __future__ import annotations

import json

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


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    },
}
# The tiny random model is held to one lookup call (vLLM structured outputs; the server's hermes parser reads
# the call back, streamed as tool-call deltas).
FORCED_CALL = '<tool_call>\\n\\{"name": "lookup", "arguments": \\{"word": "(ab|abc)"\\}\\}\\n</tool_call>'


@pytest.mark.vllm
async def test_streamed_calls_are_recorded_ready_to_train(vllm_endpoint, tiny_model_path):
    """stream=True inside a captured rollout: the chunks the caller reads fold into the Choice the call would
    have returned unstreamed (text, tool calls, every sampled token id and logprob), async and sync clients."""
    from openai import AsyncOpenAI, OpenAI
    from transformers import AutoTokenizer

    from art_core.training.tokenize import tokenize_histories

    base, key, name = vllm_endpoint.base_url, vllm_endpoint.api_key, vllm_endpoint.model
    client, sync_client = AsyncOpenAI(base_url=base, api_key=key), OpenAI(base_url=base, api_key=key)
    messages = [{"role": "user", "content": "Look up ab."}]
    with art.trajectory() as t:
        stream = await client.chat.completions.create(
            model=name,
            messages=messages,
            tools=[LOOKUP],
            max_tokens=80,  # the call is 73 characters: room for any tokenization of it
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"structured_outputs": {"regex": FORCED_CALL}},
        )
        chunks = [chunk async for chunk in stream]
        first = t.messages_and_choices[-1]
        [call] = first.message.tool_calls
        # The caller continues as LangChain does: arguments parsed and sent back re-serialized.
        function = {"name": "lookup", "arguments": json.dumps(json.loads(call.function.arguments), indent=1)}
        messages += [
            {"role": "assistant", "tool_calls": [{"id": call.id, "type": "function", "function": function}]},
            {"role": "tool", "tool_call_id": call.id, "content": "a short word"},
        ]
        with sync_client.chat.completions.create(
            model=name, messages=messages, tools=[LOOKUP], max_tokens=6, stream=True
        ) as second:
            text = "".join(c.choices[0].delta.content or "" for c in second if c.choices)
        early = await client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "Go on."}], max_tokens=30, stream=True
        )
        async for _ in early:
            break  # closed before its end: what the reader saw is not a whole reply
        await early.close()

    assert [m["role"] if isinstance(m, dict) else "choice" for m in t.messages_and_choices] == [
        "user",
        "choice",
        "tool",
        "choice",
    ]
    assert t.additional_histories == []  # neither the re-serialized call nor the early-closed stream split it
    assert call.function.name == "lookup" and json.loads(call.function.arguments)["word"] in ("ab", "abc")
    assert first.finish_reason == "tool_calls" and t.tools == [LOOKUP]
    usage = [c.usage for c in chunks if c.usage is not None][-1]
    assert len(first.logprobs.content) == usage.completion_tokens
    assert all(tok.token.startswith("token_id:") for tok in first.logprobs.content)
    assert (t.messages_and_choices[3].message.content or "") == text
    [seq] = tokenize_histories(t, AutoTokenizer.from_pretrained(tiny_model_path))
    assert seq.num_trainable == usage.completion_tokens + len(t.messages_and_choices[3].logprobs.content)


async def test_a_stream_missing_sampled_tokens_is_refused():
    """A server that streams fewer logprobs than it sampled (vLLM hides them behind a reasoning parser with
    include_reasoning off) cannot be trained on: the capture says so instead of recording a partial reply."""
    import httpx
    from openai import AsyncOpenAI

    def sse(request: httpx.Request) -> httpx.Response:
        def chunk(choices, usage=None):
            body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": choices}
            return "data: " + json.dumps({**body, "usage": usage}) + "\n\n"

        token = {"token": "token_id:7", "logprob": -0.5, "bytes": None, "top_logprobs": []}
        events = [
            chunk([{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "logprobs": {"content": [token]}}]),
            chunk([{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": {"content": []}}]),
            chunk([], {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
        ]
        return httpx.Response(
            200, text="".join(events) + "data: [DONE]\n\n", headers={"content-type": "text/event-stream"}
        )

    client = AsyncOpenAI(
        base_url="http://server/v1", api_key="x", http_client=httpx.AsyncClient(transport=httpx.MockTransport(sse))
    )
    with art.trajectory() as t:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(RuntimeError, match="call without stream=True"):
            [c async for c in stream]
    assert t.messages_and_choices == []


async def test_parse_records_a_plain_choice():
    """`parse` (structured outputs; LangChain's with_structured_output) is recorded like `create`, as the plain
    Choice it extends, so the trajectory stores and trains as any other."""
    import httpx
    from openai import AsyncOpenAI
    from openai.types.chat.chat_completion import Choice
    from pydantic import BaseModel

    class Answer(BaseModel):
        word: str

    token = {"token": "token_id:7", "logprob": -0.5, "bytes": None, "top_logprobs": []}
    reply = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": '{"word": "ab"}'},
                "logprobs": {"content": [token]},
            }
        ],
    }
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=reply))
    client = AsyncOpenAI(base_url="http://server/v1", api_key="x", http_client=httpx.AsyncClient(transport=transport))
    messages = [{"role": "user", "content": "A word?"}]
    with art.trajectory() as t:
        parsed = await client.chat.completions.parse(model="m", messages=messages, response_format=Answer)
    assert parsed.choices[0].message.parsed == Answer(word="ab")
    [user, choice] = t.messages_and_choices
    assert user == messages[0] and type(choice) is Choice and choice.message.content == '{"word": "ab"}'
    assert (
        art.Trajectory.model_validate_json(t.model_dump_json()).messages_and_choices[1].logprobs.content[0].logprob
        == -0.5
    )
