"""One GRPO step on each process torchrun starts: the entry of a data-parallel step on one node or several.

    torchrun --nproc-per-node 8 -m art_core.training.torchrun_step --base-model /models/qwen7b \\
        --groups s3://bucket/art/demo/models/agent/trajectories/train/0003.jsonl \\
        --storage s3://bucket/art --project demo --name agent --step 3 --config '{"learning_rate": 1e-5}'

Every rank reads the same groups file and checkpoint `step` from storage every node reaches, trains its share
(distributed.py), and rank 0 writes checkpoint `step + 1` and prints the TrainResult as JSON. WORLD_SIZE sets
TrainConfig.ranks. Several nodes: the same command on each with --nnodes, --node-rank and --rdzv-endpoint
(docs/multi-gpu.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Sequence

from art_core.training import distributed


def main(argv: Sequence[str] | None = None) -> int:
    """One GRPO step on this torchrun process: every rank reads the same groups file and checkpoint `step`."""
    parser = argparse.ArgumentParser(
        prog="python -m art_core.training.torchrun_step", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--base-model", required=True)
    parser.add_argument(
        "--groups", required=True, help="a groups .jsonl under the storage root (ModelStore.read_groups)"
    )
    parser.add_argument("--storage", required=True, help="storage root every rank reaches: a shared folder or s3://")
    parser.add_argument("--project", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--config", default="{}", help="TrainConfig fields as JSON")
    parser.add_argument("--timeout-s", type=float, default=distributed.TIMEOUT_S)
    args = parser.parse_args(argv)

    from art_core.storage import Storage
    from art_core.store import ModelStore
    from art_core.training.config import TrainConfig
    from art_core.training.trainer import train_grpo_step

    logging.basicConfig(level=logging.INFO)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    config = TrainConfig.model_validate({**json.loads(args.config), "ranks": world})
    if world > 1:
        distributed.init_process_group(rank, world, timeout_s=args.timeout_s)
    storage = Storage(args.storage)
    groups = ModelStore(storage, args.project, args.name).read_groups(args.groups)
    if groups is None:
        raise SystemExit(f"no groups file at {args.groups}")
    result = train_grpo_step(
        base_model=args.base_model,
        groups=groups,
        config=config,
        storage=storage,
        project=args.project,
        name=args.name,
        step=args.step,
    )
    if rank == 0:
        print(result.model_dump_json())
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
