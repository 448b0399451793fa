"""`Trajectory(additional_histories=...)`: each history becomes its own training sequence (ART's semantics)."""

from __future__ import annotations

from openai.types.chat.chat_completion import Choice

from art_core import History, Trajectory
from art_core.training.tokenize import tokenize_histories


def sampled(ids: list[int]) -> Choice:
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "x"},
            "logprobs": {
                "content": [{"token": f"token_id:{i}", "logprob": -1.0, "bytes": None, "top_logprobs": []} for i in ids]
            },
        }
    )


def test_each_history_is_a_sequence_of_its_own_with_only_its_sampled_tokens_trained(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    t = Trajectory(
        messages_and_choices=[{"role": "user", "content": "main task"}, sampled([11, 12, 13])],
        additional_histories=[
            History(messages_and_choices=[{"role": "user", "content": "sub agent"}, sampled([21, 22])]),
            History(messages_and_choices=[{"role": "user", "content": "context only, nothing sampled"}]),
            History(
                messages_and_choices=[
                    {"role": "system", "content": "s"},
                    {"role": "user", "content": "u"},
                    sampled([31]),
                    {"role": "user", "content": "again"},
                    sampled([32, 33]),
                ]
            ),
        ],
        reward=0.75,
    )
    seqs = tokenize_histories(t, tok, group_index=2, trajectory_index=5)
    assert [s.extra["history"] for s in seqs] == [0, 1, 3]
    trained = [[i for i, m in zip(s.input_ids, s.trainable) if m] for s in seqs]
    assert trained == [[11, 12, 13], [21, 22], [31, 32, 33]]
    assert all(s.reward == 0.75 and (s.group_index, s.trajectory_index) == (2, 5) for s in seqs)
    assert "sub agent" not in tok.decode(seqs[0].input_ids) and "main task" not in tok.decode(seqs[1].input_ids)


def test_the_trainer_trains_every_history_with_its_trajectorys_advantage(tiny_model_path):
    from transformers import AutoTokenizer

    from art_core import TrajectoryGroup
    from art_core.training.config import TrainConfig
    from art_core.training.trainer import prepare_sequences

    tok = AutoTokenizer.from_pretrained(tiny_model_path)

    def traj(reward: float, sub: bool) -> Trajectory:
        extra = [History(messages_and_choices=[{"role": "user", "content": "sub"}, sampled([41, 42])])] if sub else []
        return Trajectory(
            messages_and_choices=[{"role": "user", "content": "go"}, sampled([11, 12])],
            additional_histories=extra,
            reward=reward,
        )

    group = TrajectoryGroup([traj(1.0, True), traj(0.0, False)])
    seqs, counts = prepare_sequences([group], tok, TrainConfig(), max_seq_len=4096)
    by_history = {(s.trajectory_index, s.extra["history"]): s.advantage for s in seqs}
    # Trajectory 0 (the better one) is trained on its main conversation and its sub-agent's, both with +1.
    assert by_history == {(0, 0): by_history[(0, 0)], (0, 1): by_history[(0, 0)], (1, 0): by_history[(1, 0)]}
    assert by_history[(0, 0)] > 0 > by_history[(1, 0)]
    assert counts["trajectories"] == 2  # advantages are per trajectory, not per sequence
