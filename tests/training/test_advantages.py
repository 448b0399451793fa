"""Group-relative advantages, checked against values computed by hand."""

from __future__ import annotations

import pytest

from art_core.training.advantages import group_advantages, step_advantages


def test_advantages_of_a_small_group():
    # rewards 1, 0, .5, .5: mean .5; centred .5 -.5 0 0; population std sqrt(.5/4) = 0.35355339
    adv = group_advantages([1.0, 0.0, 0.5, 0.5])
    assert adv == pytest.approx([0.5 / (0.35355339 + 1e-6), -0.5 / (0.35355339 + 1e-6), 0.0, 0.0], abs=1e-7)
    assert group_advantages([1.0, 0.0, 0.5, 0.5], scale_by_std=False) == [0.5, -0.5, 0.0, 0.0]
    assert group_advantages([3.0, 1.0], scale_by_std=False) == [1.0, -1.0]


def test_groups_without_signal_are_skipped_and_counted():
    out = step_advantages([[0.2, 0.2 + 1e-9, 0.2], [1.0, 0.0], [0.5]], tolerance=1e-6)
    assert out.per_group[0] is None and out.per_group[2] is None
    assert out.per_group[1] == pytest.approx([1.0, -1.0], abs=1e-5)
    assert out.skipped_groups == 2
    assert "group 0: all 3 rewards equal" in out.skipped_reasons[0]
    assert "group 2 has 1 usable trajectory" in out.skipped_reasons[1]
