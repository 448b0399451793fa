"""The pipeline installs under the distribution's own name, so a user's own `tasks` or `flows` hides nothing.

The repository keeps tasks/ and flows/ as top-level folders; the wheel ships them as art_pipeline.tasks and
art_pipeline.flows (pyproject.toml), and every import and entrypoint of ours names those. Three ways a user
meets the code, each run from a folder holding their own tasks/ package and flows.py module:
- the editable install `make` leaves in .venv;
- the built wheel, unpacked ahead of everything on the path;
- a bare source checkout on PYTHONPATH (a second worktree), which must run its own files.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import json, art_core, art_pipeline.tasks, art_pipeline.flows
from prefect.flows import load_flow_from_entrypoint
flow = load_flow_from_entrypoint("art_pipeline.flows.retrain:retrain")
print(json.dumps({"art_core": art_core.__file__, "tasks": art_pipeline.tasks.__file__,
                  "flows": art_pipeline.flows.__file__, "flow": flow.name}))
"""


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    """A user's project folder with their own `tasks` package and `flows` module, both failing on import."""
    folder = tmp_path / "project"
    (folder / "tasks").mkdir(parents=True)
    (folder / "tasks" / "__init__.py").write_text("raise ImportError('the user tasks package was imported')\n")
    (folder / "flows.py").write_text("raise ImportError('the user flows module was imported')\n")
    return folder


def _probe(cwd: Path, pythonpath: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _copy_source(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, dest / name)
    for name in ("art_core", "art_pipeline", "tasks", "flows"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_the_editable_install_ignores_a_users_tasks_and_flows(user_folder):
    found = _probe(user_folder)
    assert found["tasks"] == str(REPO / "tasks" / "__init__.py")
    assert found["flows"] == str(REPO / "flows" / "__init__.py")
    assert found["flow"] == "retrain"


def test_the_wheel_ships_the_pipeline_under_its_own_name(tmp_path, user_folder):
    source = _copy_source(tmp_path / "source")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", "dist"],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = (source / "dist").glob("art_pipeline-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"art_core", "art_pipeline"}  # no top-level tasks or flows to collide with a user's
    # every package folder of the checkout is in the wheel (pyproject lists them by hand)
    inits = [p for folder in ("art_core", "tasks", "flows") for p in REPO.glob(f"{folder}/**/__init__.py")]
    for init in inits:
        rel = init.relative_to(REPO).as_posix()
        shipped = rel if rel.startswith("art_core") else f"art_pipeline/{rel}"
        assert shipped in names, f"{rel} is missing from the wheel: add its package to pyproject.toml's list"
    assert "art_pipeline/flows/train.py" in names and "art_pipeline/tasks/train.py" in names
    assert any(n.startswith("art_core/envs/retail/") and n.endswith(".md") for n in names)  # package data

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    found = _probe(user_folder, pythonpath=str(site))
    assert found == {
        "art_core": str(site / "art_core" / "__init__.py"),
        "tasks": str(site / "art_pipeline" / "tasks" / "__init__.py"),
        "flows": str(site / "art_pipeline" / "flows" / "__init__.py"),
        "flow": "retrain",
    }


def test_a_bare_checkout_on_the_path_runs_its_own_files(tmp_path, user_folder):
    """A second worktree beside the editable install of the first: its own tasks and flows, not the install's."""
    source = _copy_source(tmp_path / "worktree")
    found = _probe(user_folder, pythonpath=str(source))
    assert found["tasks"] == str(source / "tasks" / "__init__.py")
    assert found["flows"] == str(source / "flows" / "__init__.py")


def test_the_short_forms_still_work_from_the_repository_root():
    """`python -m flows.X` and an entrypoint written before the rename, run from the repository's root."""
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from prefect.flows import load_flow_from_entrypoint as load; print(load('flows.retrain:retrain').name)",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("retrain"), r.stderr[-3000:]
    r = subprocess.run(
        [sys.executable, "-m", "flows.overrides", "--help"], cwd=REPO, capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 0 and "field=value" in r.stdout, r.stderr[-3000:]


def test_our_code_imports_the_pipeline_by_its_installed_name():
    """No `import tasks...` or `from flows...` left in our files: under a wheel those names are the user's."""
    offenders = []
    for folder in ("art_core", "art_pipeline", "tasks", "flows", "bench", "scripts", "tests"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                if any(m.split(".")[0] in ("tasks", "flows") for m in mods):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert "tasks" not in packages and "flows" not in packages
