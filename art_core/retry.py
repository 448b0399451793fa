"""`@art.retry`: retry a flaky rollout (or any function) with exponential backoff, as ART's decorator does.

ART examples wrap rollouts with it so that, e.g., a reply cut off by max_tokens is rolled out again:

    @art.retry(exceptions=(openai.LengthFinishReasonError,))
    async def rollout(model, scenario) -> art.Trajectory: ...

Works on coroutine functions and plain functions alike. After `max_attempts` failures the last
exception propagates (gather_trajectory_groups then counts it against max_exceptions).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from typing import Any, Callable, TypeVar

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def retry(
    max_attempts: int = 3,
    delay: float = 0.25,
    backoff_factor: float = 2.0,
    exceptions: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
    on_retry: Callable[[BaseException, int], None] | None = None,
) -> Callable[[F], F]:
    """Decorator: call again on one of `exceptions`, waiting `delay`, then `delay * backoff_factor`, ...

    `exceptions` may be one class or a tuple (ART's notebooks pass both forms). `on_retry(exc, attempt)`
    replaces the default warning log.

        >>> calls = []
        >>> @retry(max_attempts=2, delay=0)
        ... def flaky():
        ...     calls.append(1)
        ...     if len(calls) < 2:
        ...         raise ValueError("once")
        ...     return "ok"
        >>> flaky(), len(calls)
        ('ok', 2)
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    catch = exceptions if isinstance(exceptions, tuple) else (exceptions,)

    def report(exc: BaseException, attempt: int, name: str) -> None:
        if on_retry is not None:
            on_retry(exc, attempt)
        else:
            log.warning("retry %d/%d of %s after %s: %s", attempt, max_attempts, name, type(exc).__name__, exc)

    def decorate(func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                wait = delay
                for attempt in range(1, max_attempts + 1):
                    try:
                        return await func(*args, **kwargs)
                    except catch as exc:
                        if attempt == max_attempts:
                            raise
                        report(exc, attempt, func.__qualname__)
                        await asyncio.sleep(wait)
                        wait *= backoff_factor

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            wait = delay
            for attempt in range(1, max_attempts + 1):
                try:
                    return func(*args, **kwargs)
                except catch as exc:
                    if attempt == max_attempts:
                        raise
                    report(exc, attempt, func.__qualname__)
                    time.sleep(wait)
                    wait *= backoff_factor

        return sync_wrapper  # type: ignore[return-value]

    return decorate


__all__ = ["retry"]
