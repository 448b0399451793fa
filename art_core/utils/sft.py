"""ART's `art.utils.sft`: SFT from a chat-format JSONL file, and the chunked iterator the SFT notebooks use
(both implemented in art_core.sft).

    for chunk in create_sft_dataset_iterator(trajectories, epochs=3, peak_lr=2e-4):
        await model.train_sft(chunk.trajectories, chunk.config)
"""

from art_core.sft import create_sft_dataset_iterator, train_sft_from_file

__all__ = ["create_sft_dataset_iterator", "train_sft_from_file"]
