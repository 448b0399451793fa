"""Benchmark: what the Prefect pipeline costs on top of the same art_core calls in a plain loop.

    python bench/pipeline.py              # ~3-5 minutes on 2 CPU cores; appends to bench/results/pipeline.txt
    python bench/pipeline.py --steps 4 --groups 4 --group-size 8

In one process, against one vLLM server serving the tiny model and a Prefect test server:
1. warm-up: one plain step on a throw-away model (imports, first trainer load), so neither side pays it;
2. plain loop: N steps of scenarios -> rollout_groups -> write_groups -> train_step -> record_metrics
   (run once before and once after the flow and averaged, since the load drifts);
3. the train flow with the same sizes on a fresh model name (every step a Prefect task, results persisted);
4. the same flow again: everything from the cache and checkpoints.
Reported: seconds per step of each (whole run / N), their ratio (target <= 1.10), Prefect's own cost per
step measured inside the flow run (step wall time minus time in the task bodies), and the cached
re-run's time as a fraction of the first run. On a shared 2-core machine the plain-loop comparison
swings by tens of percent from load alone; the in-run figure does not.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "pipeline.txt")


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and everything it started (vLLM server and engine, the
    Prefect test server). Unlike wall time it barely moves with what other users run on the machine."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def plain_loop(cfg, steps: int) -> list[float]:
    """The same art_core calls as the flow's tasks (art_core.step), in a plain for loop; seconds per step."""
    from art_core.rollouts import checkpoint_fingerprint
    from art_core.serving import discover_endpoint
    from art_core.step import gather_step, train_and_record
    from flows.train import refs

    ref, rollout = refs(cfg)
    store = ref.store()
    endpoint = discover_endpoint(cfg.inference_url, os.environ["ART_INFERENCE_API_KEY"])
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        fingerprint = checkpoint_fingerprint(store.storage, ref.project, ref.model, step)
        gathered = gather_step(ref, rollout, step, fingerprint, lambda rank: endpoint)
        train_and_record(store, ref.base_model, store.read_groups(gathered.uri), cfg.train, step)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--out", default=RESULTS, help="file the section is appended to (earlier sections are kept)")
    args = p.parse_args()

    from prefect.testing.utilities import prefect_test_harness

    from art_core.inference.server import ServerConfig, VLLMServer
    from art_core.testing.tiny_model import build_tiny_model
    from flows.config import RunConfig
    from flows.train import train

    work = tempfile.mkdtemp(prefix="bench-pipeline-")
    model_path = build_tiny_model(os.path.join(work, "tiny"))
    server = VLLMServer(ServerConfig(model=model_path, served_model_name="tiny")).start()
    os.environ["ART_INFERENCE_API_KEY"] = server.api_key or ""

    def config(name: str, steps: int) -> RunConfig:
        return RunConfig(
            project="bench",
            model=name,
            base_model=model_path,
            storage_url=os.path.join(work, "art"),
            environment={"name": "tic-tac-toe", "options": {"constrain_moves": True}},
            steps=steps,
            groups_per_step=args.groups,
            group_size=args.group_size,
            train={"learning_rate": 2e-3, "old_logprobs": "recompute"},
            sampling={"max_tokens": args.max_tokens},
            inference_url=server.base_url,
            report_to_wandb=False,
        )

    try:
        plain_loop(config("warmup", 1), 1)
        c0 = cpu_seconds()
        plain = plain_loop(config("plain-before", args.steps), args.steps)
        plain_cpu = cpu_seconds() - c0
        with prefect_test_harness(server_startup_timeout=180):
            t0, c0 = time.perf_counter(), cpu_seconds()
            first = train(config("flow", args.steps))
            flow_s, flow_cpu = time.perf_counter() - t0, cpu_seconds() - c0
            t0 = time.perf_counter()
            again = train(config("flow", args.steps))
            cached_s = time.perf_counter() - t0
            assert again.trained_steps == [], "the cached re-run trained again"
        c0 = cpu_seconds()
        plain += plain_loop(config("plain-after", args.steps), args.steps)  # before and after: load drifts
        plain_cpu += cpu_seconds() - c0
    finally:
        server.stop()

    plain_per_step, flow_per_step = sum(plain) / len(plain), flow_s / args.steps
    loop_per_step = sum(first.step_seconds.values()) / args.steps
    # Inside the same flow run: wall time of each step minus the time spent in the task bodies (the
    # art_core calls) is what Prefect itself adds. Unlike the plain loop, this is immune to load drift.
    body = sum(sum(p.values()) for p in first.phase_seconds.values()) / args.steps
    overhead = loop_per_step - body
    lines = [
        f"bench/pipeline.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {platform.machine()}, "
        f"{os.cpu_count()} CPUs, python {platform.python_version()}",
        f"tiny model on tic-tac-toe (moves constrained), vLLM CPU server, local storage; {args.steps} steps of "
        f"{args.groups} groups x {args.group_size} rollouts, max_tokens {args.max_tokens}",
        "",
        f"plain loop (same art_core calls)   {plain_per_step:7.2f} s/step   (before+after: {', '.join(f'{t:.2f}' for t in plain)};"
        f" median {statistics.median(plain):.2f})",
        f"Prefect train flow (whole run / N) {flow_per_step:7.2f} s/step   (incl. flow start, artifacts, reports)",
        f"Prefect train flow (its step loop) {loop_per_step:7.2f} s/step   (steps: "
        f"{', '.join(f'{t:.2f}' for t in first.step_seconds.values())}; gather+score+train tasks only)",
        f"ratio flow / plain, whole run      {flow_per_step / plain_per_step:7.2f}      (target <= 1.10)",
        f"ratio flow / plain, step loop      {loop_per_step / plain_per_step:7.2f}",
        f"Prefect's own cost per step        {overhead:7.2f} s    (step wall time minus time inside the task bodies, "
        f"{body:.2f} s)",
        f"ratio flow step / same calls       {loop_per_step / body:7.2f}      (the same run, so no load drift between the two)",
        f"CPU seconds per step, plain loop   {plain_cpu / (2 * args.steps):7.2f}      (this process, vLLM and, for the flow, "
        "the Prefect server)",
        f"CPU seconds per step, Prefect flow {flow_cpu / args.steps:7.2f}",
        f"ratio of CPU seconds flow / plain  {flow_cpu / args.steps / (plain_cpu / (2 * args.steps)):7.2f}      "
        "(less sensitive to other users' load than wall time)",
        f"cached re-run                      {cached_s:7.2f} s = {cached_s / flow_s:.1%} of the first run ({flow_s:.1f} s)",
    ]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "a") as f:  # a dated section after the earlier ones: the file is the history
        f.write(("\n" if f.tell() else "") + text)
    print(text)


if __name__ == "__main__":
    main()
