"""Evaluate a served model on tau2-retail / tau2-airline test tasks with the scripted customer: pass^k overall
and per task category (write / refuse / answer), the never-acts baseline on the same tasks, and tau2's published
figures for larger models beside them, with the run's departures from tau2's protocol (the scripted customer
first among them).

    python -m art_core.envs.tau2.evaluation --domain retail --base-url http://127.0.0.1:8000/v1 \\
        --model my-agent@12 --trials 4 --out tau2-retail.md
    >>> text, report, floor = await evaluate_tau2("retail", endpoint, "my-agent@12", trials=4)
    >>> report.headline, floor.headline          # write pass^1 of the model, and of never-acts (0.0)

Retail tasks whose reward needs tau2's NL-assertion judge call an LLM judge (ART_JUDGE_MODEL, or `judge=`);
`skip_judged=True` leaves those tasks out instead, and the report says how many.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

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


def report_markdown(domain: str, report: "EvalReport", floor: "EvalReport", note: str = "") -> str:
    """The model's pass^k per category beside the never-acts baseline's."""
    ks = sorted(report.pass_k)
    head = " | ".join(f"pass^{k}" for k in ks)
    lines = [
        f"# tau2-{domain}: {report.model} on the {report.split} split ({report.scenarios} tasks x {report.trials} trials)",
        "",
        f"Headline: {report.headline.metric} = {report.headline.figure()} (never-acts: {floor.headline.value:.3f})",
        "",
        f"| policy | tasks | reward | {head} |",
        "|---|---|---|" + "---|" * len(ks),
    ]

    def row(name: str, n: int, reward: float, pass_k: dict[int, float]) -> str:
        return f"| {name} | {n} | {reward:.3f} | " + " | ".join(f"{pass_k.get(k, 0.0):.3f}" for k in ks) + " |"

    for name, r in ((report.model, report), ("never-acts", floor)):
        lines.append(row(f"{name}, all", r.scenarios, r.reward, r.pass_k))
        for category, score in r.by_category.items():
            lines.append(row(f"{name}, {category}", score.scenarios, score.reward, score.pass_k))
    if report.by_kind or floor.by_kind:
        from art_core.reporting import kind_table

        rows = [report.model_dump(), floor.model_dump()]  # floor.model is "never-acts"
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
    **options: Any,
) -> tuple[str, "EvalReport", "EvalReport"]:
    """(markdown report, the model's EvalReport, never-acts' EvalReport) on tau2's `split` with the scripted
    customer; `options` go to the environment (data_dir, judge, max_steps, ...)."""
    from art_core.envs.customer_service.policies import never_acts
    from art_core.evaluate import evaluate_model, evaluate_policy

    env = load_tau2_env(domain, **options)
    sampling = sampling or env.protocol.sampling()
    tasks = env.scenarios(split)[:scenarios]
    keep = [s.id for s in tasks if not (skip_judged and needs_judge(s.data["task"]))]
    chosen = _Chosen(env, keep)
    n = len(keep)
    report, _ = await evaluate_model(
        chosen, endpoint, model, step=0, split=split, scenarios=n, trials=trials, sampling=sampling
    )
    floor, _ = await evaluate_policy(chosen, never_acts, split=split, scenarios=n, trials=trials)
    note = f"{len(tasks) - n} tasks needing tau2's NL-assertion judge were left out." if n < len(tasks) else ""
    reference = reference_markdown(
        f"tau2-{domain}", {**options, "user": "scripted"}, sampling, split=split, scenarios=n, trials=trials
    )
    return report_markdown(domain, report, floor, note) + "\n" + (reference or ""), report, floor


def main(argv: list[str] | None = None) -> None:
    from art_core.serving import Endpoint

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", choices=["retail", "airline"], required=True)
    parser.add_argument("--base-url", required=True, help="the OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", required=True, help="the served model name (e.g. name@step)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--scenarios", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--skip-judged", action="store_true", help="leave out tasks needing the NL-assertion judge")
    parser.add_argument("--out", default=None, help="write the markdown report here too")
    args = parser.parse_args(argv)
    endpoint = Endpoint(base_url=args.base_url, api_key=args.api_key, base_name=args.model)
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
        )
    )
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
