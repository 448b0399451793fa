"""Trajectory and TrajectoryGroup: lossless JSONL round trips, Choices with logprobs included."""

import io

from openai.types.chat.chat_completion import Choice

from art_core import Trajectory, TrajectoryGroup
from art_core.trajectories import choice_to_message, read_jsonl, write_jsonl


def sampled_choice() -> Choice:
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_order", "arguments": '{"id": "#W1"}'},
                    }
                ],
            },
            "logprobs": {
                "content": [
                    {"token": "token_id:17", "logprob": -0.5, "bytes": None, "top_logprobs": []},
                    {"token": "token_id:4", "logprob": -1.25, "bytes": None, "top_logprobs": []},
                ]
            },
        }
    )


def make_trajectory() -> Trajectory:
    return Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": "Where is my order?"},
            sampled_choice(),
            {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "pending"}'},
        ],
        tools=[{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}],
        reward=0.75,
        metrics={"turns": 2, "solved": True},
        metadata={"scenario": "s-1", "note": None},
        logs=["judge: fine"],
    )


def test_jsonl_round_trip_keeps_choices_and_logprobs():
    group = TrajectoryGroup([make_trajectory(), make_trajectory()], metadata={"scenario": "s-1"})
    buf = io.StringIO()
    assert write_jsonl([group], buf) == 1
    (back,) = read_jsonl(io.StringIO(buf.getvalue()))
    assert back == group
    choice = back.trajectories[0].messages_and_choices[2]
    assert isinstance(choice, Choice)
    assert [t.token for t in choice.logprobs.content] == ["token_id:17", "token_id:4"]
    assert choice.logprobs.content[1].logprob == -1.25
    assert isinstance(back.trajectories[0].messages_and_choices[3], dict)


def test_messages_turn_choices_into_assistant_messages():
    msgs = make_trajectory().messages()
    assert msgs[2] == choice_to_message(sampled_choice())
    assert msgs[2]["role"] == "assistant"
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "get_order"


def test_group_keeps_rewards_and_finish_records_duration():
    t = make_trajectory().finish()
    assert t.metrics["duration"] >= 0
    assert TrajectoryGroup([t]).rewards() == [0.75]


async def test_track_duration_sums_the_time_spent_in_each_block():
    import asyncio

    t = Trajectory()
    for _ in range(2):
        async with t.track_duration("llm"):
            await asyncio.sleep(0.02)
    assert 0.04 <= t.metrics["llm_duration"] < 1.0


def test_additional_histories_round_trip_and_show_in_for_logging():
    from art_core import History

    t = Trajectory(
        messages_and_choices=[{"role": "user", "content": "main"}, sampled_choice()],
        additional_histories=[History(messages_and_choices=[{"role": "user", "content": "sub"}, sampled_choice()])],
        reward=0.5,
    )
    again = Trajectory.model_validate_json(t.model_dump_json())
    assert again == t and isinstance(again.additional_histories[0].messages_and_choices[1], Choice)
    logged = t.for_logging()
    assert logged["reward"] == 0.5 and logged["messages"][1]["role"] == "assistant"
    assert logged["additional_histories"][0]["messages"][0]["content"] == "sub"


def test_exceptions_given_with_the_trajectories_are_kept_as_errors():
    g = TrajectoryGroup([Trajectory(reward=1.0), RuntimeError("rollout broke")], exceptions=[KeyError("k")])
    assert g.rewards() == [1.0]
    assert [e.type for e in g.exceptions] == ["KeyError", "RuntimeError"]


def test_stored_lines_with_fields_of_other_versions_still_load_while_callers_are_refused():
    import io
    import json

    import pytest

    from art_core.trajectories import History, Trajectory, TrajectoryGroup, read_jsonl

    stored = {
        "trajectories": [
            {
                "reward": 0.5,
                "written_by": "an older art_core",
                "additional_histories": [{"messages_and_choices": [], "kind": "sub-agent"}],
            }
        ],
        "exceptions": [{"type": "E", "message": "m", "traceback": "t", "code": 3}],
        "cohort": "a",
    }
    (group,) = read_jsonl(io.StringIO(json.dumps(stored) + "\n"))
    assert group.rewards() == [0.5] and not hasattr(group.trajectories[0], "written_by")
    assert group.exceptions[0].type == "E"
    with pytest.raises(TypeError, match="cohort"):
        TrajectoryGroup([], cohort="a")
    with pytest.raises(TypeError, match="kind"):
        History(kind="sub-agent")
    with pytest.raises(TypeError, match="did you mean 'metadata'"):
        Trajectory(metdata={})


def test_a_keyword_trajectory_does_not_know_stays_on_the_object_only(caplog, monkeypatch):
    from art_core import trajectories
    from art_core.trajectories import Trajectory

    monkeypatch.setattr(trajectories, "_warned_attributes", set())

    scenario = object()  # ART's MCP-RL notebook passes its scenario dataclass
    t = Trajectory(reward=1.0, scenario=scenario)
    assert t.scenario is scenario and "scenario" not in t.model_dump_json()
    assert "kept as the attribute .scenario" in caplog.text
    caplog.clear()
    Trajectory(scenario=scenario)
    assert not caplog.records  # named once per process
