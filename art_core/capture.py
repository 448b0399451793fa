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
recorded (a judge, a summariser). A streamed call (`stream=True`) is recorded once its stream has been read
to the end, its chunks folded into the Choice the same call returns without streaming (text, tool calls,
and every sampled token's id and logprob). `with_raw_response` calls (LangChain's) and `parse` (structured
outputs) are recorded too.

`with art.Trajectory() as t:` (ART 2026) captures a block into `t` the same way; such blocks nest, the
innermost recording, and each asyncio task sees only the blocks it was started under.

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
import json
import logging
import warnings
from typing import Any, AsyncIterator, Container, Coroutine, Iterator

from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_message import ChatCompletionMessage

from art_core.trajectories import History, Trajectory, choice_to_message

log = logging.getLogger(__name__)

_active: contextvars.ContextVar[tuple[_TrajectoryScope, ...]] = contextvars.ContextVar("art_core_captures", default=())
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
        (c.get("id"), (c.get("function") or {}).get("name"), _same_json((c.get("function") or {}).get("arguments")))
        for c in (m.get("tool_calls") or [])
    )
    content = m.get("content")
    if isinstance(content, list):  # content parts: keep their text
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return m.get("role"), content or "", calls


def _same_json(arguments: Any) -> Any:
    """Tool-call arguments compared as JSON: a client that parses them and sends them back re-serialized
    (LangChain writes `{"a": 1}` for the model's `{"a":1}`) still continues the same conversation."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments


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


def _target(client: Any) -> Trajectory | None:
    """The trajectory a call made here and now by `client` lands in (None: no capture, under no_capture, or
    a client the innermost capture does not record)."""
    current = _active.get()
    if not current or _paused.get():
        return None
    scope = current[-1]
    if scope.only_clients is not None and client not in scope.only_clients:
        return None
    return scope.trajectory


def _record(target: Trajectory, kwargs: dict[str, Any], choice: Any, n: int = 1) -> None:
    if n > 1:  # one trajectory holds one reply per turn, as in ART
        log.warning("capture: a request asked for %d choices; the first is recorded", n)
    if type(choice) is not Choice:  # parse()'s ParsedChoice: keep the plain Choice it extends
        parsed = {"parsed": True, "tool_calls": {"__all__": {"function": {"parsed_arguments"}}}}
        choice = Choice.model_validate(choice.model_dump(exclude={"message": parsed}))
    record_exchange(target, list(kwargs.get("messages") or []), choice, kwargs.get("tools"))


class _StreamedReply:
    """The chunks of one streamed reply, folded into the Choice the same call returns without stream=True:
    the text, the tool calls (their argument pieces joined by index) and every sampled token's logprob
    (with our server, its id as `token_id:N`). Recorded when the stream ends; one closed early is not."""

    def __init__(self, target: Trajectory, kwargs: dict[str, Any]) -> None:
        self.target, self.kwargs = target, kwargs
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.tokens: list[Any] = []
        self.finish_reason: str | None = None
        self.completion_tokens: int | None = None
        self.choices = 1
        self.has_logprobs = False

    def add(self, chunk: Any) -> None:
        usage = getattr(chunk, "usage", None)
        if usage is not None and usage.completion_tokens is not None:
            self.completion_tokens = usage.completion_tokens
        for choice in getattr(chunk, "choices", None) or []:
            if choice.index != 0:  # n > 1: the first reply is recorded, as without streaming
                self.choices = max(self.choices, choice.index + 1)
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
            for call in (delta.tool_calls if delta is not None else None) or []:
                slot = self.calls.setdefault(
                    call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = call.id or slot["id"]
                if call.function is not None:
                    slot["function"]["name"] = call.function.name or slot["function"]["name"]
                    slot["function"]["arguments"] += call.function.arguments or ""
            if choice.logprobs is not None:
                self.has_logprobs = True
                self.tokens.extend(choice.logprobs.content or [])
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def choice(self) -> Choice:
        calls = [self.calls[i] for i in sorted(self.calls)]
        message = ChatCompletionMessage(role="assistant", content="".join(self.text) or None, tool_calls=calls or None)
        logprobs = ChoiceLogprobs(content=self.tokens) if self.has_logprobs else None
        # Constructed as the SDK builds a returned Choice: a server's own finish reason ("abort") is kept.
        return Choice.model_construct(index=0, message=message, finish_reason=self.finish_reason, logprobs=logprobs)

    def end(self) -> None:
        if self.finish_reason is None:  # the reader stopped early: what it saw is not a whole reply
            log.warning("capture: a streamed chat completion was closed before its end and is not recorded")
            return
        counted = self.completion_tokens if self.choices == 1 else None  # usage counts every choice's tokens
        if self.has_logprobs and counted is not None and counted != len(self.tokens):
            raise RuntimeError(
                f"capture: the streamed reply carried the logprobs of {len(self.tokens)} sampled tokens but the "
                f"server counted {counted}, so it cannot be trained on; call without stream=True "
                "inside a captured rollout, or serve without a reasoning parser that hides streamed logprobs"
            )
        _record(self.target, self.kwargs, self.choice(), self.choices)


async def _fold_async(chunks: AsyncIterator[Any], reply: _StreamedReply) -> AsyncIterator[Any]:
    try:
        async for chunk in chunks:
            reply.add(chunk)
            yield chunk
    finally:
        reply.end()


def _fold_sync(chunks: Iterator[Any], reply: _StreamedReply) -> Iterator[Any]:
    try:
        for chunk in chunks:
            reply.add(chunk)
            yield chunk
    finally:
        reply.end()


def _after(target: Trajectory | None, kwargs: dict[str, Any], returned: Any) -> Any:
    """Record what a call returned into `target` (chosen when the call was made); hand `returned` back."""
    from openai import AsyncStream, Stream
    from openai._legacy_response import LegacyAPIResponse

    if target is None:
        return returned
    # with_raw_response (how LangChain calls): parse() caches its result, so the caller's own parse()
    # later gets the very object recorded here.
    completion = returned.parse() if isinstance(returned, LegacyAPIResponse) else returned
    if isinstance(completion, AsyncStream):
        completion._iterator = _fold_async(completion._iterator, _StreamedReply(target, kwargs))
    elif isinstance(completion, Stream):
        completion._iterator = _fold_sync(completion._iterator, _StreamedReply(target, kwargs))
    elif getattr(completion, "choices", None):
        _record(target, kwargs, completion.choices[0], len(completion.choices))
    elif not hasattr(completion, "choices"):  # with_streaming_response: the body is the caller's to read
        warnings.warn(
            f"art_core capture: a chat completion returned as {type(completion).__name__} is not recorded; call "
            "create() or with_raw_response.create() inside a captured rollout",
            UserWarning,
            stacklevel=3,
        )
    return returned


def install() -> None:
    """Wrap openai's chat-completions `create` and `parse` (async and sync) so active captures see each call;
    once. The trajectory a call lands in is chosen when it is made, so a stream read elsewhere lands right."""
    global _installed
    if _installed:
        return
    from openai.resources.chat.completions import AsyncCompletions, Completions

    def wrap_async(original: Any) -> Any:
        @functools.wraps(original)
        async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            target = _target(self._client)
            return _after(target, kwargs, await original(self, *args, **kwargs))

        return call

    def wrap_sync(original: Any) -> Any:
        @functools.wraps(original)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            target = _target(self._client)
            return _after(target, kwargs, original(self, *args, **kwargs))

        return call

    for name in ("create", "parse"):
        setattr(AsyncCompletions, name, wrap_async(getattr(AsyncCompletions, name)))
        setattr(Completions, name, wrap_sync(getattr(Completions, name)))
    _installed = True


# ---- ART's names -----------------------------------------------------------------------------------
def current_trajectory(required: bool = False, *, require: bool | None = None) -> Trajectory | None:
    """The trajectory being captured in this context (None outside one; `required=True` raises instead)."""
    current = _active.get()
    if current:
        return current[-1].trajectory
    if required or require:
        raise RuntimeError(
            "No trajectory is being captured here: call this inside `await art.trajectory(rollout())` "
            "or `with art.Trajectory() as t:`"
        )
    return None


class _TrajectoryScope:
    """`await trajectory(coro)` captures a coroutine; `with trajectory() as t:` captures a block."""

    def __init__(
        self,
        coroutine: Coroutine[Any, Any, Any] | None,
        only_clients: Container[Any] | None,
        trajectory: Trajectory | None = None,
    ) -> None:
        self.coroutine, self.only_clients = coroutine, only_clients
        self.trajectory = trajectory if trajectory is not None else Trajectory()

    def __await__(self) -> Any:
        return self._run().__await__()

    async def _run(self) -> Trajectory:
        if self.coroutine is None:
            raise TypeError("await art.trajectory(rollout(...)) needs the rollout's raw coroutine")
        with self:
            await self.coroutine
        return self.trajectory

    def __enter__(self) -> Trajectory:
        install()
        _active.set((*_active.get(), self))
        return self.trajectory

    def __exit__(self, *exc: Any) -> None:
        # Left by stack order rather than by token, as ART does: a context left in another task than the one
        # that entered it (an async generator's) still pops, and a crossed pair of exits is refused.
        current = _active.get()
        if not current or current[-1] is not self:
            raise RuntimeError("trajectory contexts must exit in stack order (the innermost first)")
        _active.set(current[:-1])
        self.trajectory.finish()


def enter_trajectory(trajectory: Trajectory) -> Trajectory:
    """`with art.Trajectory() as t:` (Trajectory.__enter__): capture the block's chat completions into t.

    Contexts nest: the innermost is `current_trajectory()` and records the calls; each asyncio task
    sees the contexts it was started under, so rollouts gathered inside one context stay apart."""
    scope = _TrajectoryScope(None, None, trajectory)
    scope.__enter__()
    return trajectory


def exit_trajectory(trajectory: Trajectory) -> None:
    """Trajectory.__exit__: leave the innermost context, which must be `trajectory`'s, and finish it."""
    current = _active.get()
    if not current or current[-1].trajectory is not trajectory:
        raise RuntimeError("trajectory contexts must exit in stack order (the innermost first)")
    current[-1].__exit__()


def trajectory(coroutine: Coroutine[Any, Any, Any] | None = None, *, only_clients: Container[Any] | None = None) -> Any:
    """Capture the chat completions of `coroutine` (awaited) or of a `with` block into a new Trajectory.

    `only_clients` (ours, not ART's): record only calls made through these `openai` clients (a set that may
    grow during the rollout); art_core.langgraph records its chat models' calls this way, as ART does."""
    if coroutine is not None and not inspect.iscoroutine(coroutine):
        raise TypeError(
            f"art.trajectory takes a rollout's raw coroutine (rollout(...)), not a {type(coroutine).__name__}"
        )
    return _TrajectoryScope(coroutine, only_clients)


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
    "enter_trajectory",
    "exit_trajectory",
    "install",
    "no_capture",
    "record_exchange",
    "trajectory",
    "yield_trajectory",
]
