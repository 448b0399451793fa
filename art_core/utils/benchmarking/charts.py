"""ART's `art.utils.benchmarking.charts`: not available here (why: art_core.utils.benchmarking)."""

from art_core._unavailable import refuse_all
from art_core.utils.benchmarking import WHY

__getattr__ = refuse_all(__name__, WHY)
