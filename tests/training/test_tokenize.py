"""Tokenizing trajectories: sampled ids are trained, everything else is context, bad input is named."""

from __future__ import annotations

import math

import pytest
from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall, Function

from art_core.training.tokenize import ChatTemplateError, TrajectoryError, tokenize_trajectory
from art_core.trajectories import Trajectory
from tests.training.rollouts_hf import make_choice

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "find_order",
            "description": "Find an order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "integer"}}},
        },
    }
]


def _tool_choice(tokenizer, order_id: int):
    text = f'<tool_call>\n{{"name": "find_order", "arguments": {{"order_id": {order_id}}}}}\n</tool_call><|im_end|>'
    ids = tokenizer.encode(text, add_special_tokens=False)
    call = ChatCompletionMessageToolCall(
        id=f"call_{order_id}",
        type="function",
        function=Function(name="find_order", arguments=f'{{"order_id": {order_id}}}'),
    )
    return ids, make_choice(ids, [-0.5 - i / 100 for i in range(len(ids))], content="", tool_calls=[call])


def test_three_turn_tool_trajectory_masks_exactly_the_sampled_tokens(tokenizer):
    ids1, c1 = _tool_choice(tokenizer, 7)
    ids2, c2 = _tool_choice(tokenizer, 8)
    ids3 = tokenizer.encode("Order 8 is delivered.<|im_end|>", add_special_tokens=False)
    c3 = make_choice(ids3, [-1.0] * len(ids3), content="Order 8 is delivered.")
    traj = Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "You help."},
            {"role": "user", "content": "Where is my order?"},
            c1,
            {"role": "tool", "tool_call_id": "call_7", "content": "not found"},
            c2,
            {"role": "tool", "tool_call_id": "call_8", "content": "delivered"},
            c3,
            {"role": "user", "content": "thanks"},  # after the last Choice: cut, it cannot change a trained token
        ],
        tools=TOOLS,
        reward=1.0,
    )
    seq = tokenize_trajectory(traj, tokenizer, group_index=2, trajectory_index=5)

    # Written out by hand from the Qwen2.5 template: the context pieces between the sampled turns.
    tools_json = "\n".join(__import__("json").dumps(t) for t in TOOLS)
    prompt = (
        "<|im_start|>system\nYou help.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{tools_json}\n</tools>\n\nFor each function call, return a json object with function name and arguments "
        'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWhere is my order?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # The sampled turn ended with <|im_end|>; the template's own <|im_end|> after it is not repeated.
    between = "\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    pieces = [
        (enc(prompt), False),
        (ids1, True),
        (enc(between.format("not found")), False),
        (ids2, True),
        (enc(between.format("delivered")), False),
        (ids3, True),
        (enc("\n"), False),
    ]
    assert seq.input_ids == [t for ids, _ in pieces for t in ids]
    assert seq.trainable == [flag for ids, flag in pieces for _ in ids]
    assert seq.num_trainable == len(ids1) + len(ids2) + len(ids3)
    sampled_lps = [lp for c in (c1, c2, c3) for lp in (x.logprob for x in c.logprobs.content)]
    assert [lp for lp, t in zip(seq.old_logprobs, seq.trainable) if t] == sampled_lps
    assert all(math.isnan(lp) for lp, t in zip(seq.old_logprobs, seq.trainable) if not t)
    assert (seq.group_index, seq.trajectory_index, seq.reward) == (2, 5, 1.0)


def test_a_truncated_turn_keeps_the_templates_end_of_turn_as_context(tokenizer):
    ids = tokenizer.encode("hello there", add_special_tokens=False)  # finish_reason "length": no <|im_end|>
    traj = Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "hi"},
            make_choice(ids, [-1.0] * len(ids), "hello there", finish_reason="length"),
        ]
    )
    seq = tokenize_trajectory(traj, tokenizer)
    end = tokenizer.encode("<|im_end|>\n", add_special_tokens=False)
    assert seq.input_ids[-len(end) - len(ids) :] == ids + end
    assert seq.trainable[-len(end) - len(ids) :] == [True] * len(ids) + [False] * len(end)


def test_a_template_that_rewrites_history_is_refused(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    # Like templates that drop earlier reasoning: what came before the last turn renders differently later.
    tok.chat_template = (
        "{{ 'Turns so far: ' ~ (messages | length) ~ '\n' }}"
        "{% for m in messages %}{{ '<|im_start|>' ~ m.role ~ '\n' ~ m.content ~ '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    ids = tok.encode("ok<|im_end|>", add_special_tokens=False)
    traj = Trajectory(
        messages_and_choices=[{"role": "user", "content": "hi"}, make_choice(ids, [-1.0] * len(ids), "ok")]
    )
    with pytest.raises(ChatTemplateError, match="not prefix-preserving"):
        tokenize_trajectory(traj, tok)


def test_bad_trajectories_name_themselves_and_say_what_to_do(tokenizer):
    no_choice = Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "a dict, not a Choice"},
        ]
    )
    with pytest.raises(TrajectoryError, match=r"group 1, trajectory 3: it has no sampled Choice.*Append the Choice"):
        tokenize_trajectory(no_choice, tokenizer, group_index=1, trajectory_index=3)

    choice = make_choice([5, 6], [-1.0, -1.0], "x")
    choice.logprobs = None
    no_logprobs = Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}, choice])
    with pytest.raises(TrajectoryError, match="no logprobs.*logprobs=True"):
        tokenize_trajectory(no_logprobs, tokenizer)

    ids = list(range(100, 160))
    long = Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}, make_choice(ids, [-1.0] * 60, "x")])
    with pytest.raises(
        TrajectoryError, match=r"group 0, trajectory 4: it is \d+ tokens long, more than max_seq_len 50"
    ):
        tokenize_trajectory(long, tokenizer, trajectory_index=4, max_seq_len=50)
