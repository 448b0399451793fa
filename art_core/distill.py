"""ART's `art.distill` (on-policy distillation against a teacher's token distributions): not available here.

ART prepares distillation batches (`distill.prepare`, `TopK`, `ForwardKL`, ...) from its exchange capture, asks
a teacher endpoint for prompt log-probabilities through its own serving protocol, and trains them only on
MegatronBackend. art_core has neither that protocol nor Megatron. What it does have is distillation by SFT, the
path of ART's `sft/distillation.ipynb`: collect the teacher's conversations as Trajectories, then
`create_sft_dataset_iterator` + `model.train_sft` (or `backend.train_sft(model, "teacher.jsonl")`). Any name
taken from this module raises NotImplementedError saying so.
"""

from art_core._unavailable import refuse_all

WHY = (
    "ART's distribution distillation needs MegatronBackend and a teacher serving ART's prompt-logprob protocol, "
    "neither of which art_core has; distil by SFT instead: teacher trajectories -> "
    "art_core.utils.sft.create_sft_dataset_iterator -> model.train_sft (docs/art-compatibility.md)"
)
__getattr__ = refuse_all(__name__, WHY)
