"""Progress of long loops, fit for a terminal and for a log file alike.

On a terminal (or in a notebook) it is a tqdm bar redrawn in place. Anywhere else (stderr sent to a file, a
pipe, CI, a Prefect worker's log) a bar redrawn in place is a flood of carriage returns, so it prints one
plain line every ART_PROGRESS_EVERY_S seconds (default 30) and a last one when it closes:

    SFT m step 1: 4/128 conversation (3%) after 160s, about 83 min left, loss=0.31

The time left is the rate so far (counted from the bar's start, so a resumed bar's `initial` is left out) times
what remains: a log of an hour-long SFT epoch says when it will end, as tqdm's bar does on a terminal. Work
done concurrently says none (`eta=False`): a gather's rollouts all run at once and most finish near the end
(a Gemma gather logged "7/64 after 390s, about 53 min left" and was done 97 s later).

    bar = progress_bar(total=32, desc="gather", unit="trajectory")
    bar.set_postfix({"groups": "5/8"}, refresh=False)
    bar.update(1)
    bar.close()
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

DEFAULT_EVERY_S = 30.0


def progress_bar(
    total: int, desc: str, unit: str = "it", initial: int = 0, file: TextIO | None = None, eta: bool = True
) -> Any:
    """A tqdm bar when `file` (default: stderr) is a terminal or a notebook's output, else a `LineProgress`;
    `eta=False` for items done concurrently, whose count says nothing of the time left.

    >>> import io; type(progress_bar(3, "gather", file=io.StringIO())).__name__
    'LineProgress'
    """
    out = file if file is not None else sys.stderr
    if _draws_in_place(out):
        from tqdm.auto import tqdm

        plain = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"  # tqdm's default, less the time left
        return tqdm(total=total, desc=desc, unit=unit, initial=initial, file=file, bar_format=None if eta else plain)
    return LineProgress(total, desc, unit, initial=initial, file=out, eta=eta)


def _draws_in_place(out: Any) -> bool:
    if type(out).__module__.startswith("ipykernel"):  # a notebook: tqdm.auto draws a widget
        return True
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


def every_s() -> float:
    """Seconds between two lines of a LineProgress: ART_PROGRESS_EVERY_S, default 30."""
    try:
        return max(0.0, float(os.environ.get("ART_PROGRESS_EVERY_S") or DEFAULT_EVERY_S))
    except ValueError:
        return DEFAULT_EVERY_S


def duration(seconds: float) -> str:
    """A time span as a log line says it: seconds under a minute and a half, minutes under an hour and a half.

    >>> duration(42), duration(180), duration(2.4 * 3600)
    ('42s', '3 min', '2.4 h')
    """
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class LineProgress:
    """The part of tqdm's interface our loops use (update, set_postfix, refresh, close), printing whole lines:
    at most one every `every` seconds while counting, and one when closed."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str = "it",
        *,
        initial: int = 0,
        file: TextIO | None = None,
        every: float | None = None,
        eta: bool = True,
    ) -> None:
        self.total, self.desc, self.unit, self.n, self.initial = total, desc, unit, initial, initial
        self.eta = eta
        self.file = file if file is not None else sys.stderr
        self.every = every_s() if every is None else every
        self.postfix: dict[str, Any] = {}
        self.started = self.last = time.monotonic()
        self.printed: tuple[int, str] | None = None  # what the last line showed (count, postfix)
        self.closed = False

    def set_postfix(self, postfix: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        self.postfix = {**(postfix or {}), **kwargs}
        if refresh:
            self.refresh()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.every:
            self.refresh()

    def refresh(self) -> None:
        """Print the current line now, unless nothing changed since the last one."""
        shown = (self.n, repr(self.postfix))
        if shown != self.printed:
            print(self.line(), file=self.file, flush=True)
            self.printed = shown
        self.last = time.monotonic()

    def line(self) -> str:
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        elapsed = time.monotonic() - self.started
        parts = [f"{self.desc}: {self.n}/{self.total} {self.unit}{share} after {elapsed:.0f}s"]
        done = self.n - self.initial
        if self.eta and 0 < done and self.n < self.total:
            parts.append(f"about {duration(elapsed / done * (self.total - self.n))} left")
        parts += [f"{k}={v}" for k, v in self.postfix.items()]
        return ", ".join(parts)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.refresh()
