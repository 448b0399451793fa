"""ART's `art.utils.logging`: the one-line printing helpers ART's notebooks and scenario generator use.

    from art_core.utils.logging import info, ok, step, warn, err, dim
    step("Generating scenarios …")
    ok("24 scenarios")          # -> 12:03:07 OK    24 scenarios

Each prints one line to stdout: the time, a label, the message. They print, as ART's do, rather than go
through the `logging` module, so a notebook shows them with no handler configured. Colours (`_C`) are ANSI
codes where stdout is a terminal or a notebook, and empty strings where it is a file or a pipe
(NO_COLOR set: none anywhere), so a log file reads as plain text.
"""

from __future__ import annotations

import os
import sys
import time


def _colours_wanted() -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if "ipykernel" in sys.modules:  # a notebook renders ANSI codes
        return True
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


class _C:
    """ANSI codes (ART's names), or empty strings where colour is not wanted (decided at import)."""

    _on = _colours_wanted()
    RESET = "\033[0m" if _on else ""
    BOLD = "\033[1m" if _on else ""
    DIM = "\033[2m" if _on else ""
    GRAY = "\033[90m" if _on else ""
    BLUE = "\033[34m" if _on else ""
    CYAN = "\033[36m" if _on else ""
    GREEN = "\033[32m" if _on else ""
    YELLOW = "\033[33m" if _on else ""
    RED = "\033[31m" if _on else ""
    MAGENTA = "\033[35m" if _on else ""


def _ts() -> str:
    """The time of day, as each line starts with it (`12:03:07`)."""
    return time.strftime("%H:%M:%S")


def _line(colour: str, label: str, message: object) -> None:
    print(f"{_C.GRAY}{_ts()}{_C.RESET} {colour}{label:<5}{_C.RESET} {message}", flush=True)


def info(message: object) -> None:
    """Something worth knowing: `info("3 tools, 0 resources")`."""
    _line(_C.BLUE, "INFO", message)


def step(message: object) -> None:
    """A step starting: `step("Calling the generator …")`."""
    _line(_C.CYAN, "STEP", message)


def ok(message: object) -> None:
    """A step done: `ok("Generated 24 scenarios")`."""
    _line(_C.GREEN, "OK", message)


def warn(message: object) -> None:
    """Something off that does not stop the run: `warn("no API key set")`."""
    _line(_C.YELLOW, "WARN", message)


def err(message: object) -> None:
    """Something failed (printing only: raising is the caller's): `err("the reply is not JSON")`."""
    _line(_C.RED, "ERR", message)


def dim(message: object) -> None:
    """Secondary text, dimmed, with no time or label: `dim("   1. Add 2 and 3.")`."""
    print(f"{_C.DIM}{message}{_C.RESET}", flush=True)


__all__ = ["dim", "err", "info", "ok", "step", "warn"]
