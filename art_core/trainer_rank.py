"""ART's `art.trainer_rank` (a process's rank among the trainers of a multi-GPU Megatron run): not available.

art_core trains one LoRA on one device in the process that calls `backend.train`, so there are no trainer
ranks. Any name taken from this module raises NotImplementedError saying so:

    from art_core.trainer_rank import get_trainer_rank   # NotImplementedError: ... one device
"""

from art_core._unavailable import refuse_all

WHY = (
    "art_core trains on one device in one process (no Megatron trainer ranks); use art_core.LocalBackend, "
    "or replicas for sampling (art_core.fanout)"
)
__getattr__ = refuse_all(__name__, WHY)
