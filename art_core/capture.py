"""Auto-captured trajectories, with ART's names: a rollout makes plain OpenAI calls, the trajectory builds itself.

    async def rollout(model, scenario) -> None:
        client = model.openai_client()
        messages = [{"role": "user", "content": scenario}]
        reply = await client.chat.completions.create(model=model.get_inference_name(), messages=messages)
        art.current_trajectory().reward = score(reply.choices[0].message.content)

    group = await art.trajectory_group(art.trajectory(rollout(model, s)) for _ in range(8))
    await backend.train(model, [group])

Inside `trajectory(coroutine)` every chat completion made with an `openai` client (ours from
`model.openai_client()`, or any other) is recorded: the request's messages become context and the
returned Choice, with the sampled token ids and logprobs our server returns, is what trains. A later
request that extends the conversation continues it; one that starts another conversation (a sub-agent)
becomes an additional history of the same trajectory. Calls made under `with no_capture():` are not
recorded (a judge, a summariser). Streaming requests are not captured (a warning says so).

`auto_trajectory`/`capture_auto_trajectory` are ART's older names (deprecated there too);
`yield_trajectory`/`capture_yielded_trajectory` hand back a trajectory built by hand from deep inside a call.
The capture patches `openai`'s chat-completions `create` once, on first use; with no capture active it
only forwards the call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import warnings
from typing import Any, Coroutine, Iterator

from openai.types.chat.chat_completion import Choice

from art_core.trajectories import History, Trajectory, choice_to_message

log = logging.getLogger(__name__)

_active: contextvars.ContextVar[tuple[Trajectory, ...]] = contextvars.ContextVar("art_core_captures", default=())
_paused: contextvars.ContextVar[bool] = contextvars.ContextVar("art_core_no_capture", default=False)
_yielded: contextvars.ContextVar[list[Trajectory | None] | None] = contextvars.ContextVar(
    "art_core_yielded", default=None
)
_installed = False


# ---- recording -------------------------------------------------------------------------------------
def _as_dict(message: Any) -> dict:
    if isinstance(message, dict):
        return message
    if hasattr(message, "model_dump"):  # a ChatCompletionMessage the rollout passed back as it got it
        return message.model_dump(exclude_none=True)
    raise TypeError(f"a chat message is a {type(message).__name__}; expected a dict")


def _key(message: Any) -> tuple:
    """What makes two messages the same turn: role, text, and tool calls (ids or names with arguments)."""
    m = choice_to_message(message) if isinstance(message, Choice) else _as_dict(message)
    calls = tuple(
        (c.get("id"), (c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
        for c in (m.get("tool_calls") or [])
    )
    content = m.get("content")
    if isinstance(content, list):  # content parts: keep their text
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return m.get("role"), content or "", calls


def record_exchange(trajectory: Trajectory, messages: list[Any], choice: Choice, tools: list | None = None) -> None:
    """Add one request (its messages) and the Choice it returned to `trajectory`.

    The main conversation continues when the request repeats it as a prefix; otherwise the exchange
    continues an additional history it extends, or starts a new one.

    >>> t = Trajectory()
    >>> record_exchange(t, [{"role": "user", "content": "hi"}], choice)                    # doctest: +SKIP
    >>> record_exchange(t, [{"role": "user", "content": "hi"}, choice.message,
    ...                     {"role": "user", "content": "more"}], choice2)                  # doctest: +SKIP
    >>> len(t.messages_and_choices), len(t.additional_histories)                           # doctest: +SKIP
    (4, 0)
    """
    histories: list[Any] = [trajectory, *trajectory.additional_histories]
    keys = [_key(m) for m in messages]
    for h in histories:
        have = [_key(m) for m in h.messages_and_choices]
        if have and keys[: len(have)] == have:
            h.messages_and_choices.extend(_as_dict(m) for m in messages[len(have) :])
            h.messages_and_choices.append(choice)
            return
    new = [_as_dict(m) for m in messages] + [choice]
    if not trajectory.messages_and_choices:
        trajectory.messages_and_choices = new
        trajectory.tools = tools
    else:
        trajectory.additional_histories.append(History(messages_and_choices=new, tools=tools))


def _capture(kwargs: dict[str, Any], completion: Any) -> None:
    current = _active.get()
    if not current or _paused.get():
        return
    choices = getattr(completion, "choices", None)
    if not choices:
        return
    if len(choices) > 1:  # n > 1: one trajectory holds one reply per turn, as in ART
        log.warning("capture: a request asked for %d choices; the first is recorded", len(choices))
    record_exchange(current[-1], list(kwargs.get("messages") or []), choices[0], kwargs.get("tools"))


def install() -> None:
    """Wrap openai's chat-completions `create` (async and sync) so active captures see each call; once."""
    global _installed
    if _installed:
        return
    from openai.resources.chat.completions import AsyncCompletions, Completions

    original_async, original_sync = AsyncCompletions.create, Completions.create

    @functools.wraps(original_async)
    async def create_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        completion = await original_async(self, *args, **kwargs)
        _after(kwargs, completion)
        return completion

    @functools.wraps(original_sync)
    def create_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
        completion = original_sync(self, *args, **kwargs)
        _after(kwargs, completion)
        return completion

    AsyncCompletions.create, Completions.create = create_async, create_sync  # type: ignore[method-assign]
    _installed = True


def _after(kwargs: dict[str, Any], completion: Any) -> None:
    if not _active.get() or _paused.get():
        return
    if kwargs.get("stream"):
        warnings.warn(
            "art_core capture: streamed chat completions are not recorded; call without stream=True "
            "inside a captured rollout",
            UserWarning,
            stacklevel=3,
        )
        return
    _capture(kwargs, completion)


# ---- ART's names -----------------------------------------------------------------------------------
def current_trajectory(required: bool = False, *, require: bool | None = None) -> Trajectory | None:
    """The trajectory being captured in this context (None outside one; `required=True` raises instead)."""
    current = _active.get()
    if current:
        return current[-1]
    if required or require:
        raise RuntimeError("no trajectory is being captured here: call this inside `await art.trajectory(rollout())`")
    return None


class _TrajectoryScope:
    """`await trajectory(coro)` captures a coroutine; `with trajectory() as t:` captures a block."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any] | None) -> None:
        self.coroutine, self.trajectory, self._token = coroutine, Trajectory(), None

    def __await__(self) -> Any:
        return self._run().__await__()

    async def _run(self) -> Trajectory:
        if self.coroutine is None:
            raise TypeError("await art.trajectory(rollout(...)) needs the rollout's coroutine")
        with self:
            await self.coroutine
        return self.trajectory

    def __enter__(self) -> Trajectory:
        install()
        self._token = _active.set((*_active.get(), self.trajectory))
        return self.trajectory

    def __exit__(self, *exc: Any) -> None:
        _active.reset(self._token)
        self.trajectory.finish()


def trajectory(coroutine: Coroutine[Any, Any, Any] | None = None) -> Any:
    """Capture the chat completions of `coroutine` (awaited) or of a `with` block into a new Trajectory."""
    if coroutine is not None and not inspect.iscoroutine(coroutine):
        raise TypeError(f"art.trajectory takes a rollout's coroutine (rollout(...)), not a {type(coroutine).__name__}")
    return _TrajectoryScope(coroutine)


@contextlib.contextmanager
def no_capture() -> Iterator[None]:
    """Calls made inside are not recorded in the trajectory being captured (a judge, a summariser)."""
    token = _paused.set(True)
    try:
        yield
    finally:
        _paused.reset(token)


def auto_trajectory(required: bool = False) -> Trajectory | None:
    """ART's older name of `current_trajectory` (deprecated in ART)."""
    warnings.warn("auto_trajectory() is deprecated in ART: use current_trajectory()", DeprecationWarning, stacklevel=2)
    return current_trajectory(required)


async def capture_auto_trajectory(coroutine: Coroutine[Any, Any, Any]) -> Trajectory:
    """ART's older name of `await trajectory(coroutine)` (deprecated in ART)."""
    warnings.warn("capture_auto_trajectory() is deprecated in ART: use trajectory()", DeprecationWarning, stacklevel=2)
    return await trajectory(coroutine)


def yield_trajectory(value: Trajectory) -> None:
    """Hand `value` to the enclosing `capture_yielded_trajectory` (raises outside one)."""
    box = _yielded.get()
    if box is None:
        raise RuntimeError("yield_trajectory() outside capture_yielded_trajectory(...)")
    box[0] = value


async def capture_yielded_trajectory(coroutine: Coroutine[Any, Any, Any]) -> Trajectory:
    """Run `coroutine` and return the Trajectory it passed to `yield_trajectory` (raises if none)."""
    box: list[Trajectory | None] = [None]
    token = _yielded.set(box)
    try:
        await coroutine
    finally:
        _yielded.reset(token)
    if box[0] is None:
        raise RuntimeError("the rollout returned without calling yield_trajectory(trajectory)")
    return box[0]


__all__ = [
    "auto_trajectory",
    "capture_auto_trajectory",
    "capture_yielded_trajectory",
    "current_trajectory",
    "install",
    "no_capture",
    "record_exchange",
    "trajectory",
    "yield_trajectory",
]
