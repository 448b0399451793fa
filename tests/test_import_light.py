"""`import art_core` must stay light: no torch, vLLM, transformers, peft or Prefect at import time."""

import subprocess
import sys

HEAVY = ["torch", "vllm", "transformers", "peft", "prefect", "trl"]


def test_import_art_core_loads_no_heavy_module():
    code = (
        "import sys, art_core, art_core.envs, art_core.storage, art_core.gather\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing art_core loaded: {out.stdout.strip()}"


def test_art_core_never_imports_the_prefect_layer():
    """The one-way rule: art_core -> nothing of tasks/flows/deployments/prefect."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "art_core"
    bad = re.compile(r"^\s*(from|import)\s+(prefect|art_pipeline|tasks|flows|deployments)\b", re.M)
    offenders = [str(p.relative_to(root.parent)) for p in root.rglob("*.py") if bad.search(p.read_text())]
    assert offenders == []
