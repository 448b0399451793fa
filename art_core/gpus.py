"""This machine's GPUs as CUDA numbers them, and how a child process is put on some of them.

GPU ids in our settings (`ServerOptions.gpu_ids`, ART's `trainer_gpu_ids` / `inference_gpu_ids`) count the GPUs
this process sees: with CUDA_VISIBLE_DEVICES=4,5,6 set, id 1 is physical GPU 5. A child started on ids [1, 2]
gets CUDA_VISIBLE_DEVICES=5,6, so its own cuda:0 is our id 1.

    >>> cuda_visible_devices([1], {"CUDA_VISIBLE_DEVICES": "4,5,6"})
    '5'
    >>> check_gpu_ids([0, 3], "inference_gpu_ids", visible=["0", "1"])
    Traceback (most recent call last):
    ValueError: inference_gpu_ids=[0, 3] names GPU 3, but this process sees 2 GPU(s) (ids 0-1; ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Iterable, Mapping


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process sees, in CUDA's numbering: CUDA_VISIBLE_DEVICES' entries when it is set, else one
    per GPU that nvidia-smi lists; [] on a machine without an NVIDIA GPU (torch is not imported)."""
    environ = os.environ if environ is None else environ
    if shutil.which("nvidia-smi") is None:
        return []
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    present = [line for line in probe.stdout.splitlines() if line.startswith("GPU")] if probe.returncode == 0 else []
    if not present:
        return []
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(len(present))]
    return [e.strip() for e in listed.split(",") if e.strip()]


def cuda_visible_devices(ids: Iterable[int], environ: Mapping[str, str] | None = None) -> str:
    """CUDA_VISIBLE_DEVICES for a child on GPUs `ids` (numbered as this process sees them, see the module docstring)."""
    environ = os.environ if environ is None else environ
    ids = list(ids)
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return ",".join(str(i) for i in ids)
    entries = [e.strip() for e in listed.split(",") if e.strip()]
    missing = [i for i in ids if i >= len(entries)]
    if missing:
        raise ValueError(
            f"GPU id {missing[0]} is not among this process's CUDA_VISIBLE_DEVICES={listed!r} (ids count from 0 "
            f"over that list): use ids below {len(entries)}, or widen CUDA_VISIBLE_DEVICES"
        )
    return ",".join(entries[i] for i in ids)


def check_gpu_ids(ids: list[int], setting: str, visible: list[str] | None = None) -> None:
    """Refuse GPU ids this machine cannot honour: no GPU at all, or an id past the visible ones. `setting` names
    the field in the message; `visible` defaults to `visible_gpus()`."""
    visible = visible_gpus() if visible is None else visible
    if not visible:
        raise ValueError(
            f"{setting}={ids} places work on GPUs, but this machine shows no CUDA GPU (nvidia-smi finds none, or "
            f"CUDA_VISIBLE_DEVICES hides them all): drop {setting} here; it is for CUDA machines only"
        )
    beyond = [i for i in ids if i >= len(visible)]
    if beyond:
        raise ValueError(
            f"{setting}={ids} names GPU {beyond[0]}, but this process sees {len(visible)} GPU(s) "
            f"(ids 0-{len(visible) - 1}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}): "
            "use ids among those"
        )
