"""ART 2026's explicit trajectory contexts: `with art.Trajectory() as t:` captures the block's chat completions
into t, contexts nest (the innermost records) and stay local to each asyncio task, as ART's own
tests/unit/trajectories/test_capture.py checks. No server: the OpenAI client talks to an httpx MockTransport."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from openai import AsyncOpenAI

import art_core as art

REPLY = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hello"},
            "logprobs": {"content": [{"token": "token_id:2", "logprob": -0.2, "bytes": None, "top_logprobs": []}]},
        }
    ],
}


@pytest.fixture
def client() -> AsyncOpenAI:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=REPLY))
    return AsyncOpenAI(base_url="http://server/v1", api_key="x", http_client=httpx.AsyncClient(transport=transport))


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


async def test_contexts_are_nested_and_task_local() -> None:
    """ART's test of the same name, ported with only the import changed."""
    assert art.current_trajectory() is None
    with art.Trajectory() as outer:
        assert art.current_trajectory(required=True) is outer
        with art.Trajectory() as inner:
            assert art.current_trajectory() is inner
        assert art.current_trajectory() is outer

        async def child() -> art.Trajectory:
            with art.Trajectory() as item:
                await asyncio.sleep(0)
                assert art.current_trajectory() is item
            return item

        first, second = await asyncio.gather(child(), child())
        assert first is not second
    assert art.current_trajectory() is None
    with pytest.raises(RuntimeError, match="No trajectory"):
        art.current_trajectory(required=True)


async def test_a_trajectory_context_captures_its_calls_and_the_innermost_records(client: AsyncOpenAI) -> None:
    with art.Trajectory(metadata={"scenario": "s1"}) as outer:
        await client.chat.completions.create(model="m", messages=ask("outer"))
        with art.Trajectory() as inner:
            await client.chat.completions.create(model="m", messages=ask("inner"))
        with art.trajectory() as functional:  # the function form nests with the class form
            await client.chat.completions.create(model="m", messages=ask("functional"))
    assert [m["content"] for m in outer.messages() if m["role"] == "user"] == ["outer"]
    assert [m["content"] for m in inner.messages() if m["role"] == "user"] == ["inner"]
    assert [m["content"] for m in functional.messages() if m["role"] == "user"] == ["functional"]
    assert len(outer.choices()) == len(inner.choices()) == 1
    assert outer.choices()[0].logprobs.content[0].logprob == -0.2  # the Choice is kept whole, ready to train
    assert outer.metadata == {"scenario": "s1"}  # the constructor's fields are the trajectory's
    assert "duration" in outer.metrics and "duration" in inner.metrics  # leaving finishes it


async def test_rollouts_gathered_inside_a_context_record_into_their_own() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=REPLY))
    client = AsyncOpenAI(base_url="http://server/v1", api_key="x", http_client=httpx.AsyncClient(transport=transport))

    async def rollout(i: int) -> art.Trajectory:
        with art.Trajectory() as t:
            await client.chat.completions.create(model="m", messages=ask(f"rollout {i}"))
            t.reward = i
        return t

    with art.Trajectory() as outer:
        ts = await asyncio.gather(*(rollout(i) for i in range(3)))
    assert not outer.messages_and_choices  # the children's calls went to the children
    assert [t.messages()[0]["content"] for t in ts] == ["rollout 0", "rollout 1", "rollout 2"]
    assert [t.reward for t in ts] == [0, 1, 2]


async def test_an_exception_leaves_the_context_and_propagates(client: AsyncOpenAI) -> None:
    with pytest.raises(ValueError, match="boom"):
        with art.Trajectory() as t:
            await client.chat.completions.create(model="m", messages=ask("hi"))
            raise ValueError("boom")
    assert art.current_trajectory() is None
    assert len(t.choices()) == 1 and "duration" in t.metrics


def test_contexts_must_exit_in_stack_order() -> None:
    outer, inner = art.Trajectory(), art.Trajectory()
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="stack order"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)
    assert art.current_trajectory() is None


async def test_trajectory_takes_a_raw_coroutine() -> None:
    async def rollout() -> None:
        await asyncio.sleep(0)

    assert isinstance(await art.trajectory(rollout()), art.Trajectory)
    task = asyncio.create_task(rollout())
    with pytest.raises(TypeError, match="raw coroutine"):
        await art.trajectory(task)  # type: ignore[arg-type]
    await task
