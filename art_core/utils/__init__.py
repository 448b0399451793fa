"""`art_core.utils`: the helpers ART's examples import from `art.utils`, with ART's behaviour.

    from art_core.utils import iterate_dataset, limit_concurrency
    from art_core.utils.logging import info, ok, step, warn, err

    for batch in iterate_dataset(scenarios, groups_per_step=4, num_epochs=2, initial_step=await model.get_step()):
        batch.items, batch.step, batch.epoch, batch.epoch_step          # ART 2026 style
    for items, epoch, step, epoch_step in iterate_dataset(scenarios):   # ART 2025 style (a tuple)
        ...

Like `art.utils`, this module only holds ART's names (docs/design.md, principle 10); our own code never
imports it.
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
from logging import getLogger  # not `import logging`: the name `logging` here is ART's submodule, below
from typing import Any, Callable, Generic, Iterator, NamedTuple, Sequence, TypeVar

from art_core.retry import retry
from art_core.utils import logging  # ART's `art.utils.logging` (info, ok, step, warn, err)

T = TypeVar("T")
log = getLogger(__name__)


class DatasetBatch(NamedTuple, Generic[T]):
    """One step's scenarios. Unpacks as ART 2025's tuple `(items, epoch, global_step, epoch_step)` and
    reads as ART 2026's `batch.items`, `batch.step`, `batch.epoch`, `batch.epoch_step`."""

    items: list[T]
    epoch: int
    step: int
    epoch_step: int


def iterate_dataset(
    dataset: Sequence[T],
    groups_per_step: int = 1,
    num_epochs: int = 1,
    initial_step: int = 0,
    use_tqdm: bool = True,
) -> Iterator[DatasetBatch[T]]:
    """Batches of `groups_per_step` items, every epoch in a fresh order, steps numbered across epochs.

    The order of epoch e is a shuffle seeded with e alone, so a run resumed with
    `initial_step=await model.get_step()` sees exactly the batches it would have seen (ART's semantics;
    unlike ART, the global `random` state is left alone). The last batch of an epoch may be shorter.

        >>> [b.items for b in iterate_dataset([1, 2, 3], groups_per_step=2, use_tqdm=False)]
        [[1, 3], [2]]
    """
    if groups_per_step < 1:
        raise ValueError("groups_per_step must be at least 1")
    size = len(dataset)
    if size == 0:
        return
    steps_per_epoch = math.ceil(size / groups_per_step)
    bar = None
    if use_tqdm:  # a tqdm bar on a terminal, plain lines in a log file (art_core.progress)
        from art_core.progress import progress_bar

        bar = progress_bar(steps_per_epoch * num_epochs, "Iterating dataset", unit="batch", initial=initial_step)
    try:
        for epoch in range(num_epochs):
            order = list(range(size))
            random.Random(epoch).shuffle(order)  # the same permutation ART gets from random.seed(epoch)
            for epoch_step in range(steps_per_epoch):
                step = epoch * steps_per_epoch + epoch_step
                if step < initial_step:
                    continue
                chunk = order[epoch_step * groups_per_step : (epoch_step + 1) * groups_per_step]
                yield DatasetBatch([dataset[i] for i in chunk], epoch, step, epoch_step)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def limit_concurrency(n: int, derive_key: Callable[..., Any] | None = None) -> Callable:
    """Decorator for async functions: at most `n` calls run at once (per key, if `derive_key` is given).

    @limit_concurrency(4)
    async def call_tool(...): ...

    @limit_concurrency(1, derive_key=lambda user_id, *_: user_id)   # one call per user at a time
    async def update_user(user_id, ...): ...
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    semaphores: dict[Any, asyncio.Semaphore] = {}

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = derive_key(*args, **kwargs) if derive_key is not None else None
            sem = semaphores.setdefault(key, asyncio.Semaphore(n))
            async with sem:
                return await func(*args, **kwargs)

        return wrapper

    return decorate


def format_message(message: Any) -> str:
    """A chat message (dict, openai message or Choice) as readable text: role, content and tool calls.

    >>> format_message({"role": "user", "content": "hi"})
    '[user] hi'
    """
    from art_core.trajectories import Choice, choice_to_message

    if isinstance(message, Choice):
        message = choice_to_message(message)
    elif hasattr(message, "model_dump"):
        message = message.model_dump(exclude_none=True)
    text = f"[{message.get('role', '?')}] {message.get('content') or ''}".rstrip()
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        text += f"\n  -> {fn.get('name')}({fn.get('arguments')})"
    return text


async def get_model_step(model: Any) -> int:
    """The model's latest trained step (`await model.get_step()`; 0 for a prompted model)."""
    getter = getattr(model, "get_step", None)
    return await getter() if getter is not None else 0


def log_http_errors(func: Callable) -> Callable:
    """Decorator: log the response body of an HTTP error (httpx or openai) before re-raising it."""

    def describe(exc: BaseException) -> str:
        response = getattr(exc, "response", None)
        body = getattr(response, "text", None)
        return f"{type(exc).__name__}: {exc}" + (f"; response body: {body[:2000]}" if body else "")

    if asyncio.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return await func(*args, **kwargs)
            except Exception as exc:
                log.error("%s failed: %s", func.__qualname__, describe(exc))
                raise

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            log.error("%s failed: %s", func.__qualname__, describe(exc))
            raise

    return wrapper


__all__ = [
    "DatasetBatch",
    "format_message",
    "get_model_step",
    "iterate_dataset",
    "limit_concurrency",
    "log_http_errors",
    "logging",
    "retry",
]
