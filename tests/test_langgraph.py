"""ART's `art.langgraph` (art_core.langgraph): a LangGraph ReAct agent whose chat model comes from
`init_chat_model`, run through `wrap_rollout` against the real vLLM server, trains through LocalBackend."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import art_core as art

langgraph = pytest.importorskip("langgraph", reason="the `langgraph` extra is not installed")

from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from art_core.langgraph import init_chat_model, wrap_rollout  # noqa: E402

GLOSSARY = {"ab": "a short word", "abc": "the alphabet's start"}

# The tiny random model cannot decide to call a tool, so its first turn is held to one `lookup` call (vLLM's
# structured outputs, the envelope our server's hermes parser reads back as a tool call); the second is free.
# The constraint admits any tokenization of the call, and a random model may spell it a character at a time:
# max_tokens covers its 73 characters, or a cut call would end the graph after one model turn.
FORCED_CALL = '<tool_call>\\n\\{"name": "lookup", "arguments": \\{"word": "(ab|abc)"\\}\\}\\n</tool_call>'


@tool
def lookup(word: str) -> str:
    """Look a word up in the glossary."""
    return GLOSSARY.get(word, "not in the glossary")


def react_agent(llm):
    """A ReAct loop as LangGraph writes it: the model node, a tool node, and tools_condition between them."""
    call_tool = llm.bind_tools([lookup], extra_body={"structured_outputs": {"regex": FORCED_CALL}}, max_tokens=80)
    answer = llm.bind_tools([lookup], max_tokens=6)

    async def model_node(state: MessagesState) -> dict:
        looked_up = any(isinstance(m, ToolMessage) for m in state["messages"])
        return {"messages": [await (answer if looked_up else call_tool).ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model_node)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


async def rollout(model: art.TrainableModel, question: str, streamed: bool) -> art.Trajectory:
    """ART's LangGraph rollout: build the agent from init_chat_model, run it, score its last message."""
    llm = init_chat_model(model.name)
    sent, create = [], llm.async_client.create  # what reaches the openai SDK: streamed or not, as asked

    async def spy(*args, **kwargs):
        sent.append(bool(kwargs.get("stream")))
        return await create(*args, **kwargs)

    llm.async_client.create = spy
    agent = react_agent(llm)
    inputs = {"messages": [("system", "Answer from the glossary."), ("user", question)]}
    config = {"recursion_limit": 6}
    if streamed:  # token by token, as a UI would show it: the chat model calls the server with stream=True
        async for mode, data in agent.astream(inputs, config, stream_mode=["messages", "values"]):
            if mode == "values":
                final = data
    else:
        final = await agent.ainvoke(inputs, config)
    # A judge's call through another client is not part of what the agent did.
    judge = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=[{"role": "user", "content": "Judge it."}], max_tokens=2
    )
    assert judge.choices
    assert sent == [streamed, streamed]
    reply = final["messages"][-1].content
    return art.Trajectory(messages_and_choices=[], reward=len(set(reply)) / 10, metadata={"streamed": streamed})


@pytest.mark.vllm
async def test_a_langgraph_react_agent_is_recorded_and_trains(vllm_server, tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    from art_core.local import LocalBackend
    from art_core.training.tokenize import tokenize_histories

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server)
    model = art.TrainableModel(name="graph-agent", project="langgraph", base_model=tiny_model_path)
    await model.register(backend)
    groups = await art.gather_trajectory_groups(
        [
            art.TrajectoryGroup(wrap_rollout(model, rollout)(model, q, streamed=i % 2 == 1) for i in range(4))
            for q in ("What is ab?", "What is abc?")
        ],
        pbar_desc=None,
    )
    for group in groups:
        assert len(group.trajectories) == 4 and not group.exceptions
        for t in group.trajectories:
            kinds = [m["role"] if isinstance(m, dict) else "choice" for m in t.messages_and_choices]
            assert kinds == ["system", "user", "choice", "tool", "choice"], t.metadata
            assert t.additional_histories == []  # the judge's call was not recorded
            assert t.tools and t.tools[0]["function"]["name"] == "lookup"
            call = t.messages_and_choices[2].message.tool_calls[0]
            word = json.loads(call.function.arguments)["word"]
            assert call.function.name == "lookup" and t.messages_and_choices[3]["content"] == GLOSSARY[word]
            assert t.messages_and_choices[3]["tool_call_id"] == call.id
            choices = [t.messages_and_choices[2], t.messages_and_choices[4]]
            [seq] = tokenize_histories(t, tokenizer)  # the sampled ids and logprobs, streamed or not
            assert seq.num_trainable == sum(len(c.logprobs.content) for c in choices) > 0
            assert "duration" in t.metrics
    assert {t.metadata["streamed"] for g in groups for t in g.trajectories} == {True, False}
    result = await backend.train(model, groups, learning_rate=1e-3)
    assert result.step == 1 and result.metrics["trained_trajectories"] > 0
    await backend.close()


async def test_init_chat_model_is_called_inside_wrap_rollout():
    with pytest.raises(RuntimeError, match="wrap_rollout"):
        init_chat_model()
    model = art.TrainableModel(name="unregistered", project="langgraph", base_model="tiny")

    async def no_endpoint(model: art.TrainableModel) -> None:
        init_chat_model(model.name)

    with pytest.raises(RuntimeError, match="no endpoint yet"):
        await wrap_rollout(model, no_endpoint)(model)

    async def scores_itself(model: art.TrainableModel) -> None:
        art.current_trajectory(required=True).reward = 0.5

    assert (await wrap_rollout(model, scores_itself)(model)).reward == 0.5

    async def returns_text(model: art.TrainableModel) -> str:
        return "done"

    with pytest.raises(TypeError, match="return an art.Trajectory"):
        await wrap_rollout(model, returns_text)(model)


def test_without_langgraph_the_import_names_the_extra():
    code = (
        "import sys\n"
        "sys.modules['langgraph'] = None  # as if the extra were not installed\n"
        "import art_core\n"
        "try:\n"
        "    import art_core.langgraph\n"
        "except ImportError as e:\n"
        "    print(e)\n"
        "print('langchain_core' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "art-pipeline[langgraph]" in out and "make install" in out
    assert out.strip().endswith("False")  # `import art_core` itself never loads LangChain
