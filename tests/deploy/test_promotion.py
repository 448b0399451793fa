"""Promotion: only a strictly better step replaces the promoted one."""

from art_core.deploy import decide, promote, read_promoted
from art_core.storage import Storage


def test_only_a_better_step_is_promoted(tmp_path):
    assert decide(0.5, None)
    assert decide(0.51, 0.5) and not decide(0.5, 0.5) and not decide(0.55, 0.5, min_improvement=0.1)
    s = Storage(str(tmp_path))
    assert read_promoted(s, "p", "m") is None
    promote(s, "p", "m", 3, 0.4, "val")
    assert read_promoted(s, "p", "m")["step"] == 3
