"""The GRPO trainer: trajectories to tokens and masks (tokenize), group advantages (advantages), named
losses and aggregations (losses), packing (packing), the LoRA train steps (trainer: GRPO, sft: SFT) over
one trainer session (session: lock, load, restore, hyperparameters, save), their result (result) and checkpoints.

Entry point: `art_core.training.trainer.train_grpo_step`. Nothing heavy is imported here: torch, transformers
and peft load when the trainer runs, so `import art_core` stays light.
"""
