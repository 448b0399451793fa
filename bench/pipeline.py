"""Benchmark: what the Prefect pipeline costs on top of the same art_core calls in a plain loop.

    python bench/pipeline.py              # ~5 minutes on 2 CPU cores; appends to bench/results/pipeline.txt
    python bench/pipeline.py --steps 4 --groups 4 --group-size 8 --rounds 10

In one process, against one vLLM server serving the tiny model:
1. warm-up: a plain loop of N steps on a throw-away model (imports, the trainer's first load, the first
   steps that resume from a checkpoint), so neither side pays it;
2. plain loop: N steps of gather_step (rollouts written to storage) -> train_and_record (train, checkpoint, history
   record), the art_core calls the gather and train tasks make;
3. `--rounds` times: the train flow with the same sizes on a fresh model name (every step a Prefect task,
   results persisted; a Prefect test server runs around it), the same flow twice more right after it
   (everything from the cache and checkpoints), then the plain loop again. Every flow run sits between two
   plain loops and is compared with their mean: the same work takes this machine 10% more or less time from
   one minute to the next (ten plain loops in a row: 4.4-5.3 s), so a flow run is held against its neighbours.
Reported: seconds per step of each (whole run / N), their ratio (target <= 1.10: the median over the flow
runs of each against the plain loops either side, and the pooled ratio), Prefect's own cost per
step measured inside the flow runs (step wall time minus time in the task bodies), CPU seconds split by
process (this one, vLLM, the Prefect server), the tokens each side sampled, and the median cached re-run as
a fraction of its first run (target <= 5%; a run started right after another is where the Prefect server's
SQLite used to refuse the new flow run and make it wait 2 s). Both sides seed their sampling alike
(`sampling.seed`) and train with the same seed, so every run, plain or flow, samples the same rollouts and
trains the same weights: the two sides do the same work and their difference is the pipeline's. (Unseeded, single plain steps ranged 0.56-1.91 s.)
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


def cpu_by_process() -> dict[str, float]:
    """CPU seconds used so far by this process, the vLLM server (with its engine) and the Prefect test
    server. Unlike wall time they barely move with what other users run on the machine."""
    import psutil

    me = psutil.Process()
    split = {"this process": 0.0, "vLLM": 0.0, "Prefect server": 0.0}

    def used(p: psutil.Process) -> float:
        t = p.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    split["this process"] = me.cpu_times().user + me.cpu_times().system
    for child in me.children():
        try:
            command = " ".join(child.cmdline())
            part = "Prefect server" if "prefect.server" in command else "vLLM"
            split[part] += used(child) + sum(used(c) for c in child.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return split


def sampled_tokens(cfg, steps: int) -> int:
    """Completion tokens the model sampled in the run's first `steps` steps (the work vLLM did for them)."""
    from art_pipeline.flows.train import refs

    store = refs(cfg)[0].store()
    total = 0
    for step in range(steps):
        for group in store.read_groups(store.trajectories("train", step)) or []:
            for t in group.trajectories:
                for item in t.messages_and_choices:
                    logprobs = None if isinstance(item, dict) else getattr(item, "logprobs", None)
                    total += len(logprobs.content or []) if logprobs is not None else 0
    return total


def plain_loop(cfg, steps: int) -> list[float]:
    """The same art_core calls as the flow's tasks (art_core.step), in a plain for loop; seconds per step."""
    from art_core.rollouts import checkpoint_fingerprint
    from art_core.serving import discover_endpoint
    from art_core.step import gather_step, train_and_record
    from art_pipeline.flows.train import refs

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
    p.add_argument("--rounds", type=int, default=10, help="flow runs, each between two plain loops (load drifts)")
    p.add_argument("--out", default=RESULTS, help="file the section is appended to (earlier sections are kept)")
    args = p.parse_args()

    from prefect.testing.utilities import prefect_test_harness

    from art_core.inference.server import ServerConfig, VLLMServer
    from art_core.testing.tiny_model import build_tiny_model
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.train import train

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
            sampling={"max_tokens": args.max_tokens, "seed": 0},  # the same rollouts on both sides
            inference_url=server.base_url,
            report_to_wandb=False,
        )

    plain: list[float] = []
    plain_cpu = {"this process": 0.0, "vLLM": 0.0, "Prefect server": 0.0}
    flows, flow_cpu, reruns = [], {k: 0.0 for k in plain_cpu}, []  # reruns: (seconds, first run's seconds)

    def timed_plain(name: str) -> None:
        split0 = cpu_by_process()
        plain.extend(plain_loop(config(name, args.steps), args.steps))
        for k, v in cpu_by_process().items():
            plain_cpu[k] += v - split0[k]

    try:
        plain_loop(config("warmup", args.steps), args.steps)
        # Plain, flow, plain, flow, ..., plain: each flow run between two plain loops, so drifting load falls on
        # both. A Prefect server runs only around the flows (a plain loop needs none).
        timed_plain("plain-0")
        for r in range(args.rounds):
            with prefect_test_harness(server_startup_timeout=180):
                t0, split0 = time.perf_counter(), cpu_by_process()
                first = train(config(f"flow-{r}", args.steps))
                flows.append((time.perf_counter() - t0, first))
                for k, v in cpu_by_process().items():
                    flow_cpu[k] += v - split0[k]
                for _ in range(2):  # right after it, back to back: where a new flow run used to wait 2 s
                    t0 = time.perf_counter()
                    again = train(config(f"flow-{r}", args.steps))
                    reruns.append((time.perf_counter() - t0, flows[-1][0]))
                    assert again.trained_steps == [], "the cached re-run trained again"
            timed_plain(f"plain-{r + 1}")
        tokens = {
            side: sum(sampled_tokens(config(f"{side}-{r}", args.steps), args.steps) for r in range(runs))
            for side, runs in (("plain", args.rounds + 1), ("flow", args.rounds))
        }
    finally:
        server.stop()

    n_plain, n_flow = len(plain), args.rounds * args.steps
    plain_per_step = sum(plain) / n_plain
    flow_per_step = sum(s for s, _ in flows) / n_flow
    loop_per_step = sum(sum(f.step_seconds.values()) for _, f in flows) / n_flow
    # Inside the same flow run: wall time of each step minus the time spent in the task bodies (the
    # art_core calls) is what Prefect itself adds. Unlike the plain loop, this is immune to load drift.
    body = sum(sum(sum(p.values()) for p in f.phase_seconds.values()) for _, f in flows) / n_flow
    # Each flow run against the mean of the plain loops just before and just after it (the same minutes).
    plain_runs = [sum(plain[i : i + args.steps]) for i in range(0, len(plain), args.steps)]  # each whole loop
    whole = [s / ((plain_runs[r] + plain_runs[r + 1]) / 2) for r, (s, _) in enumerate(flows)]
    shares = [t / first_s for t, first_s in reruns]
    lines = [
        f"bench/pipeline.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {platform.machine()}, "
        f"{os.cpu_count()} CPUs, python {platform.python_version()}",
        f"tiny model on tic-tac-toe (moves constrained), vLLM CPU server, local storage; {args.steps} steps of "
        f"{args.groups} groups x {args.group_size} rollouts, max_tokens {args.max_tokens}; {args.rounds} flow runs, "
        f"each between two plain loops",
        "",
        f"plain loop (same art_core calls)   {plain_per_step:7.2f} s/step   ({n_plain} steps, median "
        f"{statistics.median(plain):.2f}, range {min(plain):.2f}-{max(plain):.2f})",
        f"Prefect train flow (whole run / N) {flow_per_step:7.2f} s/step   (incl. flow start, artifacts, reports; runs: "
        f"{', '.join(f'{s:.1f}' for s, _ in flows)} s)",
        f"Prefect train flow (its step loop) {loop_per_step:7.2f} s/step   (gather+score+train tasks only)",
        f"ratio flow / plain, whole run      {statistics.median(whole):7.2f}      (target <= 1.10; median of the "
        f"runs, each against the plain loops either side: {', '.join(f'{w:.2f}' for w in whole)})",
        f"ratio flow / plain, pooled         {flow_per_step / plain_per_step:7.2f}      (all flow steps / all plain steps)",
        f"ratio flow / plain, step loop      {loop_per_step / plain_per_step:7.2f}",
        f"Prefect's own cost per step        {loop_per_step - body:7.2f} s    (step wall time minus time inside the task "
        f"bodies, {body:.2f} s)",
        f"ratio flow step / same calls       {loop_per_step / body:7.2f}      (the same run, so no load drift between the two)",
        "CPU seconds per step, plain loop:  "
        + ", ".join(f"{k} {v / n_plain:.2f}" for k, v in plain_cpu.items())
        + f"; all {sum(plain_cpu.values()) / n_plain:.2f}",
        "CPU seconds per step, Prefect flow: "
        + ", ".join(f"{k} {v / n_flow:.2f}" for k, v in flow_cpu.items())
        + f"; all {sum(flow_cpu.values()) / n_flow:.2f}",
        f"ratio of CPU seconds flow / plain  {sum(flow_cpu.values()) / n_flow / (sum(plain_cpu.values()) / n_plain):7.2f}"
        "      (less sensitive to other users' load than wall time)",
        f"tokens sampled per step (seeded alike, so they should match): plain {tokens['plain'] / n_plain:.1f}, "
        f"flow {tokens['flow'] / n_flow:.1f}",
        f"cached re-run                      {statistics.median(t for t, _ in reruns):7.2f} s = "
        f"{statistics.median(shares):.1%} of the first run, median of {len(reruns)} (target <= 5%; each: "
        f"{', '.join(f'{x:.1%}' for x in shares)})",
    ]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "a") as f:  # a dated section after the earlier ones: the file is the history
        f.write(("\n" if f.tell() else "") + text)
    print(text)


if __name__ == "__main__":
    main()
