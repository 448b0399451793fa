"""ART's `art.tinker_native` (TinkerNativeBackend, Thinking Machines' hosted Tinker API): not available here.
Any name taken from it raises NotImplementedError saying why."""

from art_core._unavailable import refuse_all
from art_core.tinker import WHY

__getattr__ = refuse_all(__name__, WHY)
