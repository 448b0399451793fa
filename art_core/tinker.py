"""ART's `art.tinker` (training through Thinking Machines' hosted Tinker API): not available here.

Tinker is a hosted service that trains and samples on Thinking Machines' machines; art_core trains the LoRA
on your own device. Any name taken from this module raises NotImplementedError saying so:

    from art_core.tinker import TinkerService   # NotImplementedError: ... use LocalBackend
"""

from art_core._unavailable import refuse_all

WHY = (
    "Thinking Machines' Tinker API is a hosted training service art_core does not call; train with "
    "art_core.LocalBackend or the Prefect train flow (docs/art-compatibility.md)"
)
__getattr__ = refuse_all(__name__, WHY)
