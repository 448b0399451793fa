"""What the judge reads: tool calls and results spelled out, the shared beginning sent once."""

from __future__ import annotations

from art_core.rewards.render import judge_user_message, render_messages, shared_prefix_len
from tests.rewards.retail_style import ENDINGS, POLICY, REQUEST, retail_group, retail_trajectory


def test_tool_calls_and_results_are_rendered_without_their_random_ids():
    blocks = render_messages(retail_trajectory(3, "Order #W2611340 is cancelled.", cancels=True).messages())
    text = "\n\n".join(blocks)
    assert 'call cancel_pending_order({"order_id": "#W2611340", "reason": "ordered by mistake"})' in text
    assert "[tool result of cancel_pending_order]" in text
    assert '"status": "cancelled"' in text
    assert "call_3_c" not in text  # sampled ids differ per rollout and would split identical attempts
    assert blocks[-1] == "[assistant]\nOrder #W2611340 is cancelled."


def test_shared_prefix_is_sent_once_and_each_trajectory_only_sends_the_rest():
    group = retail_group()
    rendered = [render_messages(t.messages()) for t in group]
    ids = [f"trajectory_{i + 1}" for i in range(len(group))]
    tools = [t.tools for t in group]
    # system, user, two lookups with their results: the same in all 8, despite different call ids
    assert shared_prefix_len(rendered) == 6
    shared = judge_user_message(rendered, ids, tools)
    whole = judge_user_message(rendered, ids, tools, share_prefix=False)
    assert shared.count(POLICY) == 1 and shared.count(REQUEST) == 1
    assert whole.count(POLICY) == 8 and whole.count(REQUEST) == 8
    assert shared.count("- cancel_pending_order(order_id, reason)") == 1  # tools listed once
    assert len(shared) < len(whole) / 3
    context, _, attempts = shared.partition("</shared_context>")
    assert POLICY in context and POLICY not in attempts
    for tid, (ending, _) in zip(ids, ENDINGS):
        assert f'<trajectory id="{tid}">' in attempts and ending in attempts


def test_an_attempt_that_stops_inside_the_shared_part_says_so():
    short = [{"role": "user", "content": "hi"}]
    longer = short + [{"role": "assistant", "content": "hello"}]
    rendered = [render_messages(short), render_messages(longer), render_messages(longer + longer)]
    text = judge_user_message(rendered, ["a", "b", "c"])
    assert '<trajectory id="a">\n(nothing after the shared context' in text
    assert "[user]\nhi" in text.partition("</shared_context>")[0]
