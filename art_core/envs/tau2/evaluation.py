"""Evaluate a served model on tau2-retail / tau2-airline test tasks with the scripted customer: pass^k overall
and per task category (write / refuse / answer), the never-acts baseline on the same tasks, and tau2's published
figures for larger models beside them, with the run's departures from tau2's protocol (the scripted customer
first among them).

    python -m art_core.envs.tau2.evaluation --domain retail --base-url http://127.0.0.1:8000/v1 \\
        --model my-agent@12 --trials 4 --out tau2-retail.md
    python -m art_core.envs.tau2.evaluation --domain retail --storage ./.art --project demo-agent \\
        --model retail-seed0 --step 2 --baseline base --skip-judged     # serves the checkpoint itself, base beside
    >>> text, report, floor = await evaluate_tau2("retail", endpoint, "my-agent@12", trials=4)   # doctest: +SKIP
    >>> report.headline, floor.headline          # write pass^1 of the model, and of never-acts (0.0)  # doctest: +SKIP

Retail tasks whose reward needs tau2's NL-assertion judge call an LLM judge (ART_JUDGE_MODEL, or `judge=`);
`skip_judged=True` leaves those tasks out instead, and the report says how many.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any, Callable, Sequence

from art_core.envs.tau2.expert import load_tau2_env, needs_judge
from art_core.envs.tau2.published import reference_markdown

if TYPE_CHECKING:
    from art_core.evaluate import EvalReport
    from art_core.serving import Endpoint


class _Chosen:
    """The environment with its test split narrowed to the tasks chosen (first `scenarios`, judged ones out)."""

    def __init__(self, env: Any, keep: list[str]) -> None:
        self._env, self._keep = env, keep

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def scenarios(self, split: Any) -> list[Any]:
        by_id = {s.id: s for s in self._env.scenarios(split)}
        return [by_id[i] for i in self._keep]

    def for_evaluation(self) -> "_Chosen":
        # evaluate_model plays env.for_evaluation(): without this the wrapped environment's own answer would
        # drop the choice, and --skip-judged would still evaluate (and judge) the first N tasks
        return _Chosen(self._env.for_evaluation(), self._keep)


def report_markdown(
    domain: str, report: "EvalReport", floor: "EvalReport", note: str = "", baselines: Sequence["EvalReport"] = ()
) -> str:
    """The model's pass^k per category beside the never-acts baseline's and any `baselines` (e.g. the base model,
    evaluated the same way), with the model's change over each paired task by task."""
    from art_core.evaluate import paired_difference

    ks = sorted(report.pass_k)
    head = " | ".join(f"pass^{k}" for k in ks)
    h = report.headline
    versus = []
    for b in baselines:
        pair = paired_difference(report, b)
        change = "" if pair is None or pair[1] is None else f", change {pair[0]:+.3f} ± {pair[1]:.3f} paired"
        versus.append(f"{b.model}: {b.headline.figure()}{change}")
    versus.append(f"never-acts: {floor.headline.value:.3f}")
    lines = [
        f"# tau2-{domain}: {report.model} on the {report.split} split ({report.scenarios} tasks x {report.trials} trials)",
        "",
        f"Headline: {h.metric} = {h.figure()} ({'; '.join(versus)})"
        + (
            f". With the customer's yes before every write: {h.with_yes:.3f} (tau2 does not check consent)"
            if h.with_yes is not None
            else ""
        ),
        "",
        f"| policy | tasks | reward | {head} |",
        "|---|---|---|" + "---|" * len(ks),
    ]

    def row(name: str, n: int, reward: float, pass_k: dict[int, float]) -> str:
        return f"| {name} | {n} | {reward:.3f} | " + " | ".join(f"{pass_k.get(k, 0.0):.3f}" for k in ks) + " |"

    reports = [report, *baselines, floor]
    for r in reports:  # floor.model is "never-acts"
        lines.append(row(f"{r.model}, all", r.scenarios, r.reward, r.pass_k))
        for category, score in r.by_category.items():
            lines.append(row(f"{r.model}, {category}", score.scenarios, score.reward, score.pass_k))
    if any(r.by_kind for r in reports):
        from art_core.reporting import kind_table

        rows = [r.model_dump() for r in reports]
        lines += ["", *kind_table(rows, rows[1:])]
    if note:
        lines += ["", note]
    return "\n".join(lines) + "\n"


async def evaluate_tau2(
    domain: str,
    endpoint: "Endpoint",
    model: str,
    *,
    split: str = "test",
    scenarios: int | None = None,
    trials: int = 4,
    sampling: dict[str, Any] | None = None,
    skip_judged: bool = False,
    baselines: Sequence[str] = (),
    serve: Callable[[str], str] | None = None,
    **options: Any,
) -> tuple[str, "EvalReport", "EvalReport"]:
    """(markdown report, the model's EvalReport, never-acts' EvalReport) on tau2's `split` with the scripted
    customer; `options` go to the environment (data_dir, judge, max_steps, ...). `baselines`: other models on
    the same endpoint (e.g. its base model) evaluated on the same tasks and shown beside, the change paired.

    `serve`, if given, is called with each name (the model, then each baseline) just before it is evaluated and
    returns the name to ask the endpoint for: a weight-swap server serves one step's weights at a time, so the
    command line loads each there in turn. The report keeps the names given."""
    from art_core.envs.customer_service.policies import never_acts
    from art_core.evaluate import evaluate_model, evaluate_policy

    env = load_tau2_env(domain, **options)
    sampling = sampling or env.protocol.sampling()
    tasks = env.scenarios(split)[:scenarios]
    keep = [s.id for s in tasks if not (skip_judged and needs_judge(s.data["task"]))]
    chosen = _Chosen(env, keep)
    n = len(keep)

    async def evaluate(name: str) -> "EvalReport":
        asked = await asyncio.to_thread(serve, name) if serve is not None else name
        evaluated, _ = await evaluate_model(
            chosen, endpoint, asked, step=0, split=split, scenarios=n, trials=trials, sampling=sampling
        )
        evaluated.model = name
        return evaluated

    report = await evaluate(model)
    others = [await evaluate(b) for b in baselines]  # the baselines on the same tasks, one after another
    floor, _ = await evaluate_policy(chosen, never_acts, split=split, scenarios=n, trials=trials)
    note = f"{len(tasks) - n} tasks needing tau2's NL-assertion judge were left out." if n < len(tasks) else ""
    reference = reference_markdown(
        f"tau2-{domain}", {**options, "user": "scripted"}, sampling, split=split, scenarios=n, trials=trials
    )
    return report_markdown(domain, report, floor, note, others) + "\n" + (reference or ""), report, floor


def main(argv: list[str] | None = None) -> None:
    from art_core.serving import Endpoint

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=["retail", "airline"], required=True)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="a running OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    where.add_argument(
        "--storage", help="serve --model's checkpoint from this storage root (a vLLM server started and stopped here)"
    )
    parser.add_argument("--model", required=True, help="the served model name (e.g. name@step), or the trained model")
    parser.add_argument("--project", help="with --storage: the model's project")
    parser.add_argument("--step", type=int, help="with --storage: the checkpoint (default: the latest)")
    parser.add_argument("--base-model", help="with --storage: default base_model from the model's model.json")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        help="another served model evaluated beside (repeatable); with --storage, 'base' is the base model",
    )
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--scenarios", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--skip-judged", action="store_true", help="leave out tasks needing the NL-assertion judge")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="messages before an episode is cut off (tau2: 200; the report says so)",
    )
    parser.add_argument("--out", default=None, help="write the markdown report here too")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {}
    server = None
    serve: Callable[[str], str] | None = None
    if args.max_steps is not None:
        options["max_steps"] = args.max_steps
    load_tau2_env(args.domain, **options)  # missing tau2 data or a bad option: said here, before any server starts
    if args.storage:
        from art_core.adapters import adapter_rank, load_checkpoint
        from art_core.deploy.serve import checkpoint_to_serve
        from art_core.inference.server import VLLMServer
        from art_core.serving import server_config
        from art_core.storage import Storage
        from art_core.store import ModelStore

        if not args.project:
            parser.error("--storage needs --project: the trained model's project")
        if any(b != "base" for b in args.baseline):
            parser.error("with --storage the only --baseline is 'base' (the base model, on the same server)")
        storage = Storage(args.storage)
        step, base = checkpoint_to_serve(storage, args.project, args.model, args.step, args.base_model)
        store = ModelStore(storage, args.project, args.model)
        steps = {args.model: step, "base": 0}  # step 0: the zero adapter, the base weights themselves
        print(f"serving {args.project}/{args.model} step {step} on {base} ...", flush=True)
        # The pipeline's way to serve a step: on a CPU the server runs without vLLM's LoRA and the step's adapter is
        # merged into its weights (art_core.inference.weight_swap), about 3x the tokens a second of serving it as
        # LoRA; each model is loaded just before its evaluation.
        server = VLLMServer(
            server_config(base, max_lora_rank=adapter_rank(store, step), gpu_memory_utilization=None)
        ).start()
        endpoint = Endpoint.of(server)

        def load(name: str) -> str:
            return load_checkpoint(endpoint, store, base, steps[name])

        serve = load
    else:
        if "base" in args.baseline:
            parser.error("--baseline base needs --storage (with --base-url, name the served base model)")
        endpoint = Endpoint(base_url=args.base_url, api_key=args.api_key, base_name=args.model)
    try:
        text, _, _ = asyncio.run(
            evaluate_tau2(
                args.domain,
                endpoint,
                args.model,
                split=args.split,
                scenarios=args.scenarios,
                trials=args.trials,
                sampling={"temperature": args.temperature, "max_tokens": args.max_tokens},
                skip_judged=args.skip_judged,
                baselines=args.baseline,
                serve=serve,
                **options,
            )
        )
    finally:
        if server is not None:
            server.stop()
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
