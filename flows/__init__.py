"""Prefect flows: train, evaluate, deploy, retrain (and the demo). Each reads like its loop; the work is in tasks/.

This distribution installs top-level packages named `tasks` and `flows` (the layout Prefect's examples
use). A user's own `tasks.py` (or `tasks/`) in the folder a flow runs from comes first on sys.path and
would hide ours; the check below turns the confusing ImportError that follows into one that names
the file. (A user's own `flows.py` hides this package itself: Python then says "'flows' is not a
package"; README.md, "Your own modules named tasks or flows", says what to do.)
"""

from __future__ import annotations

import importlib.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def check_not_shadowed(package: str = "tasks") -> None:
    """Raise ImportError naming the file when `package` would import something other than ours.

    >>> check_not_shadowed("tasks")   # silent when `import tasks` finds this distribution's package
    """
    ours = os.path.join(os.path.dirname(_HERE), package)
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None else None
    if origin and os.path.dirname(os.path.abspath(origin)) != os.path.abspath(ours):
        raise ImportError(
            f"`import {package}` finds {origin}, not this pipeline's {package} package ({ours}): a module of yours "
            f"named {package!r} hides ours. Rename {origin} (e.g. to my_{package}.py) or run from another folder."
        )


check_not_shadowed("tasks")
