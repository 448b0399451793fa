"""The Prefect layer under the distribution's own name: `art_pipeline.tasks` and `art_pipeline.flows`.

The repository keeps them as the top-level folders tasks/ and flows/ (the layout Prefect's examples use), and
the installed distribution maps those folders to these names (pyproject.toml, package-dir). Everything imports
them by these names, so a user's own `tasks.py`, `tasks/`, `flows.py` or `flows/` in the folder a flow runs
from never hides ours:

    from art_pipeline.flows.train import train
    python -m art_pipeline.flows.demo_agent          # anywhere it is installed
    python -m flows.demo_agent                       # the same module, from the repository's root

In a source checkout without an install (PYTHONPATH pointing at it, or a second git worktree beside an
editable install of the first), the finder below maps the two names to that checkout's folders, ahead of any
other mapping, so a checkout always runs its own code.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGES = ("tasks", "flows")

_HERE = Path(__file__).resolve().parent
_CHECKOUT = _HERE.parent


class _CheckoutFinder:
    """Finds `art_pipeline.tasks` and `art_pipeline.flows` in the checkout's top-level folders."""

    @staticmethod
    def find_spec(fullname: str, path: object = None, target: object = None):
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in PACKAGES:
            return None  # their submodules are found through the package's __path__, as usual
        folder = _CHECKOUT / name
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


if not (_HERE / "flows").is_dir() and all((_CHECKOUT / p / "__init__.py").is_file() for p in PACKAGES):
    sys.meta_path.insert(0, _CheckoutFinder)
