"""ART's `art.langgraph`: a LangGraph agent whose chat model is the model being trained, its calls recorded.

    from langgraph.prebuilt import create_react_agent
    from art_core.langgraph import init_chat_model, wrap_rollout

    async def rollout(model, scenario) -> art.Trajectory:
        agent = create_react_agent(init_chat_model(model.name), tools=[search_inbox])
        result = await agent.ainvoke({"messages": [("user", scenario.question)]})
        return art.Trajectory(messages_and_choices=[], reward=grade(result["messages"][-1].content, scenario))

    groups = await art.gather_trajectory_groups(
        art.TrajectoryGroup(wrap_rollout(model, rollout)(model, s) for _ in range(4)) for s in scenarios
    )
    await backend.train(model, groups)

`wrap_rollout(model, fn)` returns an async function that runs `fn` with `model`'s endpoint at hand. Inside it,
`init_chat_model()` is a LangChain `ChatOpenAI` that talks to the model being trained (its latest step), and
every call it makes, streamed or not, is recorded the way `art.trajectory` records calls (art_core.capture):
the request's messages as context, the returned Choice with its sampled token ids and logprobs as what trains;
a call that starts another conversation (a sub-agent, a summariser) becomes an additional history. Calls made
through any other client (a judge, litellm) are not recorded, as in ART. The trajectory `fn` returns gets those
messages; `fn` may also return None and set `art.current_trajectory().reward`.

Differences from ART: the chat model is a real `ChatOpenAI` (so `bind_tools`, `with_structured_output`,
`with_retry` and streaming behave as LangChain documents), nothing is written to `.art/langgraph/` log files,
and keyword arguments other than `temperature` (max_tokens, stop, extra_body, ...) reach the model instead of
being dropped. Sampling stays at temperature 1.0, as in ART: the logprobs then belong to the policy trained.

Needs the `langgraph` extra (`pip install 'art-pipeline[langgraph]'`; `make install` includes it).
"""

from __future__ import annotations

import contextvars
import functools
import warnings
import weakref
from typing import Any, Awaitable, Callable

try:
    import langgraph  # noqa: F401  the agents this module serves are LangGraph graphs
    from langchain_openai import ChatOpenAI
except ImportError as e:  # pragma: no cover - exercised in a subprocess by tests/test_langgraph.py
    raise ImportError(
        "art_core.langgraph needs LangGraph and langchain-openai: install the `langgraph` extra "
        "(pip install 'art-pipeline[langgraph]'; `make install` includes it)"
    ) from e

from art_core import capture
from art_core.trajectories import Trajectory

# The model a wrapped rollout samples from, and the openai clients of the chat models made for it (the only
# clients whose calls its trajectory records).
_rollout: contextvars.ContextVar[tuple[Any, weakref.WeakSet] | None] = contextvars.ContextVar(
    "art_core_langgraph_rollout", default=None
)


def wrap_rollout(model: Any, fn: Callable[..., Awaitable[Trajectory | None]]) -> Callable[..., Awaitable[Trajectory]]:
    """`fn` as an async function whose `init_chat_model()` calls are recorded into the Trajectory it returns.

    >>> trajectory = await wrap_rollout(model, rollout)(model, scenario)       # doctest: +SKIP
    >>> trajectory.messages_and_choices[-1]                                    # doctest: +SKIP
    Choice(finish_reason='stop', index=0, logprobs=ChoiceLogprobs(...), message=...)
    """

    @functools.wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Trajectory:
        clients: weakref.WeakSet = weakref.WeakSet()
        token = _rollout.set((model, clients))
        try:
            with capture.trajectory(only_clients=clients) as captured:
                result = await fn(*args, **kwargs)
        finally:
            _rollout.reset(token)
        return _with_captured(result, captured, fn)

    return wrapped


def _with_captured(result: Any, captured: Trajectory, fn: Any) -> Trajectory:
    if result is None:  # the rollout scored `art.current_trajectory()` itself
        return captured
    if not isinstance(result, Trajectory):
        raise TypeError(
            f"wrap_rollout: {getattr(fn, '__name__', fn)!r} returned a {type(result).__name__}; "
            "return an art.Trajectory (its messages are filled in) or None"
        )
    if captured.messages_and_choices:  # as in ART: the recorded conversation replaces what the rollout wrote
        result.messages_and_choices = captured.messages_and_choices
        result.tools = captured.tools
    result.additional_histories.extend(captured.additional_histories)
    result.metrics = {**captured.metrics, **result.metrics}
    return result


def init_chat_model(
    model: str | None = None,
    *,
    model_provider: str | None = None,
    configurable_fields: Any = None,
    config_prefix: str | None = None,
    **kwargs: Any,
) -> ChatOpenAI:
    """A LangChain chat model sampling from the model of the enclosing `wrap_rollout`, its calls recorded.

    ART's signature (LangChain's `init_chat_model`); the model is always the one being trained, so `model`
    and `model_provider` only name it. Keyword arguments go to `ChatOpenAI` (temperature stays 1.0).

    >>> llm = init_chat_model(model.name)                                      # doctest: +SKIP
    >>> agent = create_react_agent(llm, tools=[lookup])                        # doctest: +SKIP
    """
    current = _rollout.get()
    if current is None:
        raise RuntimeError(
            "init_chat_model() samples from the model being trained, so it is called inside a rollout run "
            "through wrap_rollout(model, rollout)(...)"
        )
    trained, clients = current
    if not trained.inference_base_url:
        raise RuntimeError(f"model {trained.name!r} has no endpoint yet: register it with a backend first")
    _warn_unused(trained, model, model_provider, configurable_fields, config_prefix, kwargs)
    capture.install()  # before the client exists: LangChain's with_raw_response binds `create` when first used
    chat = ChatOpenAI(
        model=trained.get_inference_name(),
        base_url=trained.inference_base_url,
        api_key=trained.inference_api_key or "none",
        max_retries=kwargs.pop("max_retries", 0),  # a dead server must show, not stall (as model.openai_client())
        timeout=kwargs.pop("timeout", 1200),
        temperature=1.0,
        **kwargs,
    )
    clients.add(chat.root_async_client)
    clients.add(chat.root_client)
    return chat


def _warn_unused(trained: Any, model: Any, provider: Any, fields: Any, prefix: Any, kwargs: dict[str, Any]) -> None:
    names = {trained.name, trained.get_inference_name()}
    if model is not None and model not in names:
        warnings.warn(
            f"init_chat_model({model!r}): inside wrap_rollout the chat model is the model being trained "
            f"({trained.get_inference_name()!r}); the name given is not used",
            UserWarning,
            stacklevel=3,
        )
    if provider not in (None, "openai") or fields is not None or prefix is not None:
        warnings.warn(
            "init_chat_model: model_provider, configurable_fields and config_prefix have no effect here (the "
            "chat model talks to the trained model's OpenAI-compatible server)",
            UserWarning,
            stacklevel=3,
        )
    temperature = kwargs.pop("temperature", 1.0)
    if temperature != 1.0:
        warnings.warn(
            f"init_chat_model(temperature={temperature}): rollouts sample at temperature 1.0, as in ART, so "
            "the recorded logprobs are those of the policy being trained",
            UserWarning,
            stacklevel=3,
        )


__all__ = ["init_chat_model", "wrap_rollout"]
