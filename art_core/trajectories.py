"""Trajectories: what one rollout produced, and groups of rollouts of the same scenario.

A `Trajectory` is a conversation in which some assistant turns are sampled `Choice`s (trained on)
and everything else is a plain message (context). Round-trips losslessly through JSONL:

    >>> t = Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=1.0)
    >>> Trajectory.model_validate_json(t.model_dump_json()) == t
    True

Text that is not valid UTF-8 (a lone surrogate such as '\\udce9', which Python makes of a file name's stray
byte) cannot be written as JSON: `escape_invalid_text` escapes it (into the six characters `\\udce9`, as
Python prints it) and counts it; the gather does so for every rollout, `write_jsonl` for anything else. A reward that is not finite
is refused at the write (JSON would store it as null, which no longer reads back); `read_jsonl` names the
line it cannot read (`DamagedRollouts`).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import logging
import math
import re
import time
import traceback
from typing import Any, AsyncIterator, Iterable, Iterator, Union

from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticSerializationError

log = logging.getLogger(__name__)

Message = dict[str, Any]
MessageOrChoice = Union[Choice, Message]
Messages = list[Message]
MessagesAndChoices = list[MessageOrChoice]
Tools = list[dict[str, Any]]


def _as_message_or_choice(item: Any) -> MessageOrChoice:
    """A dict with a "message" key and a "finish_reason" is a serialized Choice; anything else a message."""
    if isinstance(item, Choice):
        return item
    if isinstance(item, dict) and "message" in item and "finish_reason" in item:
        return Choice.model_validate(item)
    if isinstance(item, dict):
        return item
    if hasattr(item, "model_dump"):  # an openai message object the user appended directly
        return item.model_dump(exclude_none=True)
    raise TypeError(f"messages_and_choices holds a {type(item).__name__}; expected a dict message or a Choice")


class History(BaseModel):
    """Another conversation that belongs to a rollout (a sub-agent's, or one after the context was reset).

    Set on `Trajectory.additional_histories`; each one is trained as a sequence of its own, with the
    trajectory's advantage (as ART does).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages_and_choices: MessagesAndChoices = Field(default_factory=list)
    tools: Tools | None = None

    def __init__(self, **data: Any) -> None:
        refuse_unknown(type(self), data)
        super().__init__(**data)

    @field_validator("messages_and_choices", mode="before")
    @classmethod
    def _parse_items(cls, value: Iterable[Any]) -> MessagesAndChoices:
        return [_as_message_or_choice(item) for item in value]

    def messages(self) -> Messages:
        """The conversation as plain chat messages (choices turned into assistant messages)."""
        return [choice_to_message(m) if isinstance(m, Choice) else m for m in self.messages_and_choices]


# Set while stored rollouts are read back (`read_jsonl`, `reading_stored()`): a field another version wrote is
# dropped there, where a caller's unknown keyword is refused.
_READING_STORED: contextvars.ContextVar[bool] = contextvars.ContextVar("art_core_reading_stored", default=False)


@contextlib.contextmanager
def reading_stored() -> Iterator[None]:
    """Validate stored trajectories leniently inside the block: fields this version lacks are dropped.

    >>> with reading_stored():
    ...     TrajectoryGroup.model_validate({"trajectories": [{"reward": 1.0, "written_by": "v0.1"}]}).rewards()
    [1.0]
    """
    token = _READING_STORED.set(True)
    try:
        yield
    finally:
        _READING_STORED.reset(token)


def refuse_unknown(cls: type[BaseModel], data: dict[str, Any], also: Iterable[str] = ()) -> None:
    """TypeError for a keyword `cls` has no field of (pydantic would drop it without a word), naming it and what
    is accepted. Reading stored files (`reading_stored()`) drops such fields instead: other versions wrote them."""
    known = set(cls.model_fields) | set(also)
    unknown = sorted(k for k in data if k not in known)
    if unknown and _READING_STORED.get():
        for k in unknown:
            data.pop(k)
    elif unknown:
        raise TypeError(f"{cls.__name__}() got unexpected keyword argument(s) {unknown}; it accepts {sorted(known)}")


def _near_field(name: str, fields: Iterable[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, list(fields), n=1, cutoff=0.75)
    return close[0] if close else None


_warned_attributes: set[tuple[str, str]] = set()


class Trajectory(BaseModel):
    """One rollout: messages, sampled choices, tools offered, reward and what was measured."""

    # A NaN metric is written as NaN (as Python's json does), not as null, which the float field would refuse.
    model_config = ConfigDict(arbitrary_types_allowed=True, ser_json_inf_nan="constants")

    messages_and_choices: MessagesAndChoices = Field(default_factory=list)
    tools: Tools | None = None
    additional_histories: list[History] = Field(default_factory=list)
    reward: float = 0.0
    metrics: dict[str, float | int | bool] = Field(default_factory=dict)
    metadata: dict[str, float | int | str | bool | None] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)
    start_time: float = Field(default_factory=time.time, exclude=True)

    def __init__(self, **data: Any) -> None:
        """A keyword that is no field (ART's MCP-RL notebook passes `scenario=`) stays on this object as an
        attribute (`t.scenario`), is neither stored, logged nor sent to the judge, and is named once in a warning;
        put what should be kept in `metadata`. A near miss of a field's name (`rewrad=`) is a TypeError."""
        extras = {k: data.pop(k) for k in [k for k in data if k not in type(self).model_fields]}
        if _READING_STORED.get():
            extras = {}  # a stored line's field of another version: dropped
        for name in extras:
            near = _near_field(name, type(self).model_fields)
            if near:
                raise TypeError(
                    f"{type(self).__name__}() got an unexpected keyword argument {name!r}: did you mean {near!r}?"
                )
        super().__init__(**data)
        for name, value in extras.items():
            self.__dict__[name] = value  # an attribute only: pydantic serializes declared fields alone
            if (type(self).__name__, name) not in _warned_attributes:
                _warned_attributes.add((type(self).__name__, name))
                log.warning(
                    "%s(%s=...) is no field: kept as the attribute .%s of this object only (not stored, logged or "
                    "judged); put values to keep in metadata",
                    type(self).__name__,
                    name,
                    name,
                )

    @field_validator("messages_and_choices", mode="before")
    @classmethod
    def _parse_items(cls, value: Iterable[Any]) -> MessagesAndChoices:
        return [_as_message_or_choice(item) for item in value]

    def messages(self) -> Messages:
        """The conversation as plain chat messages (choices turned into assistant messages)."""
        return [choice_to_message(m) if isinstance(m, Choice) else m for m in self.messages_and_choices]

    def choices(self) -> list[Choice]:
        return [m for m in self.messages_and_choices if isinstance(m, Choice)]

    def finish(self) -> "Trajectory":
        """Record the rollout's duration in metrics["duration"] and return self."""
        self.metrics["duration"] = time.time() - self.start_time
        return self

    def log(self, line: str) -> None:
        self.logs.append(line)

    def __enter__(self) -> "Trajectory":
        """Capture the chat completions made inside the block into this trajectory (art_core.capture).

            with art.Trajectory() as t:
                reply = await client.chat.completions.create(model=name, messages=messages)
                t.reward = score(reply)

        Nested blocks record into the innermost; `art.current_trajectory()` is it. Leaving finishes it."""
        from art_core.capture import enter_trajectory

        return enter_trajectory(self)

    def __exit__(self, *exc_info: Any) -> None:
        from art_core.capture import exit_trajectory

        exit_trajectory(self)

    @contextlib.asynccontextmanager
    async def track_duration(self, name: str) -> AsyncIterator[None]:
        """Add the seconds spent in the block to metrics[f"{name}_duration"] (summed over repeated uses).

        async with trajectory.track_duration("llm"):
            reply = await client.chat.completions.create(...)
        """
        start = time.monotonic()
        try:
            yield
        finally:
            key = f"{name}_duration"
            self.metrics[key] = float(self.metrics.get(key, 0.0)) + time.monotonic() - start

    def for_logging(self) -> dict[str, Any]:
        """A JSON-ready dict for logs and tables: reward, metrics, metadata, logs, plain messages, tools.

        >>> Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=1.0).for_logging()["reward"]
        1.0
        """
        return {
            "reward": self.reward,
            "metrics": dict(self.metrics),
            "metadata": dict(self.metadata),
            "messages": self.messages(),
            "tools": self.tools,
            "additional_histories": [{"messages": h.messages(), "tools": h.tools} for h in self.additional_histories],
            "logs": list(self.logs),
        }

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:  # Choices dump as plain dicts
        kwargs.setdefault("mode", "json")
        return super().model_dump(**kwargs)

    def __eq__(self, other: object) -> bool:  # what is stored, not when the object was made
        return isinstance(other, Trajectory) and self.model_dump() == other.model_dump()


def _pending_group(awaitables: list[Any], data: dict[str, Any]) -> Any:
    """`TrajectoryGroup(coroutines, metadata=...)`: a group still to be run; any other keyword is refused,
    since a group not yet run has nothing to put it on."""
    from art_core.gather import PendingGroup

    unknown = sorted(set(data) - {"metadata"})
    if unknown:
        raise TypeError(
            f"TrajectoryGroup(rollout coroutines, ...) takes only metadata=, not {', '.join(unknown)}; "
            "use art.trajectory_group(..., return_exceptions=True) to keep failed rollouts"
        )
    return PendingGroup(awaitables, data.get("metadata"))


def choice_to_message(choice: Choice) -> Message:
    """The assistant message a Choice stands for, as a chat-template-ready dict."""
    msg = choice.message
    out: Message = {"role": "assistant", "content": msg.content or ""}
    if msg.tool_calls:
        out["tool_calls"] = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.function.name, "arguments": tc.function.arguments},
            }
            for tc in msg.tool_calls
        ]
    return out


class RolloutError(BaseModel):
    """A rollout that raised, kept in its group so nothing about the failure is lost (ART: PydanticException)."""

    type: str
    message: str
    traceback: str

    def __init__(self, **data: Any) -> None:
        refuse_unknown(type(self), data)
        super().__init__(**data)

    @classmethod
    def from_exception(cls, exc: BaseException) -> "RolloutError":
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type=type(exc).__name__, message=str(exc), traceback=tb)


class TrajectoryGroup(BaseModel):
    """Rollouts of one scenario, scored relative to each other by GRPO and RULER.

    >>> g = TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)])
    >>> len(g), g.rewards()
    (2, [1.0, 0.0])
    """

    model_config = ConfigDict(ser_json_inf_nan="constants")

    trajectories: list[Trajectory] = Field(default_factory=list)
    exceptions: list[RolloutError] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)  # ART 2026's group log lines

    def __new__(cls, trajectories: Iterable[Any] | None = None, **data: Any):
        # ART's idiom `TrajectoryGroup(rollout(...) for _ in range(n))` builds a group still to be run:
        # given awaitables we return a PendingGroup for gather_trajectory_groups. Importing it from
        # art_core.gather here is the one import back edge in art_core (gather builds on this module);
        # ART's API forces it, and tests/test_import_cycles.py allows exactly this one.
        if trajectories is not None and not isinstance(trajectories, (list, tuple)):
            items = list(trajectories)
            if items and all(inspect.isawaitable(i) for i in items):
                return _pending_group(items, data)
            instance = super().__new__(cls)
            instance.__init__(items, **data)
            return instance
        if trajectories and all(inspect.isawaitable(i) for i in trajectories):
            return _pending_group(list(trajectories), data)
        return super().__new__(cls)

    def __init__(self, trajectories: Iterable[Trajectory | BaseException] | None = None, **data: Any) -> None:
        if getattr(self, "__pydantic_fields_set__", None) is not None:
            return  # already built by __new__ from a one-shot iterator
        refuse_unknown(type(self), data)
        if trajectories is not None:
            data["trajectories"] = list(trajectories)
        # ART accepts exceptions mixed into the trajectories (and as exceptions=[...]): keep them as errors.
        items = list(data.get("trajectories") or [])
        errors = [i for i in items if isinstance(i, BaseException)]
        if errors:
            data["trajectories"] = [i for i in items if not isinstance(i, BaseException)]
        extra = [
            e if not isinstance(e, BaseException) else RolloutError.from_exception(e)
            for e in data.get("exceptions") or []
        ]
        if errors or extra:
            data["exceptions"] = extra + [RolloutError.from_exception(e) for e in errors]
        super().__init__(**data)

    def __len__(self) -> int:
        return len(self.trajectories)

    def log(self, line: str) -> None:
        self.logs.append(line)

    def __iter__(self):  # type: ignore[override]
        return iter(self.trajectories)

    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]


PydanticException = RolloutError  # ART's name for a stored exception


# ---- text that is not valid UTF-8 ---------------------------------------------------------------------
SURROGATES = re.compile("[\ud800-\udfff]")  # in a Python str never valid UTF-8, paired or not
ESCAPED_METRIC = "invalid_utf8_escaped"  # a trajectory's metric: characters escaped in it


def _escape(value: Any) -> tuple[Any, int]:
    """`value` (JSON-like: dicts, lists, strings) with every surrogate escaped, and how many there were."""
    if isinstance(value, str):
        n = len(SURROGATES.findall(value))
        return (value.encode("utf-8", "backslashreplace").decode("utf-8") if n else value), n
    if isinstance(value, dict):
        out, total = {}, 0
        for k, v in value.items():
            (k2, a), (v2, b) = _escape(k), _escape(v)
            out[k2] = v2
            total += a + b
        return out, total
    if isinstance(value, list):
        pairs = [_escape(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    return value, 0


def _serializes(item: BaseModel) -> bool:
    try:
        item.model_dump_json()
        return True
    except PydanticSerializationError as e:  # another problem (an object JSON cannot hold) is the write's to report
        return "surrogates not allowed" not in str(e)


def escape_invalid_text(item: "Trajectory | TrajectoryGroup") -> int:
    """Escape text that is not valid UTF-8 in a trajectory or a group, in place; returns how many characters.

    Each trajectory counts its own in `metrics["invalid_utf8_escaped"]`; a warning gives the total.

        >>> t = Trajectory(messages_and_choices=[{"role": "tool", "content": "caf\\udce9.txt"}])
        >>> escape_invalid_text(t), t.metrics["invalid_utf8_escaped"]
        (1, 1)
        >>> print(t.messages()[0]["content"])
        caf\\udce9.txt
    """
    if _serializes(item):  # the common case: one pass of pydantic's own serializer
        return 0
    if isinstance(item, Trajectory):
        data, n = _escape(item.model_dump(mode="json"))
        clean = Trajectory.model_validate(data)
        for name in Trajectory.model_fields:
            if name != "start_time":
                setattr(item, name, getattr(clean, name))
        if n:
            item.metrics[ESCAPED_METRIC] = int(item.metrics.get(ESCAPED_METRIC, 0)) + n
            log.warning("escaped %d characters that are not valid UTF-8 in a rollout (metric %s)", n, ESCAPED_METRIC)
        return n
    n = sum(escape_invalid_text(t) for t in item.trajectories)
    rest, m = _escape(item.model_dump(mode="json", include={"exceptions", "metadata", "metrics"}))
    if m:
        clean = TrajectoryGroup.model_validate(rest)
        item.exceptions, item.metadata, item.metrics = clean.exceptions, clean.metadata, clean.metrics
        log.warning("escaped %d characters that are not valid UTF-8 in a group's errors or metadata", m)
    return n + m


# ---- JSONL -----------------------------------------------------------------------------------------------
class DamagedRollouts(ValueError):
    """A rollout file that exists but cannot be read back: the file (when known), the line and why.

    >>> str(DamagedRollouts("reward: Input should be a valid number", line=3, path="/art/0001.jsonl"))
    'rollout file /art/0001.jsonl is damaged at line 3: reward: Input should be a valid number'
    """

    def __init__(self, reason: str, *, line: int | None, path: str | None = None) -> None:
        where = f" at line {line}" if line is not None else ""
        super().__init__(f"rollout file {path or '(unnamed)'} is damaged{where}: {reason}")
        self.reason, self.line, self.path = reason, line, path


def write_jsonl(groups: Iterable[TrajectoryGroup], f) -> int:
    """Write groups one JSON object per line to a text file object; returns the count written.

    Refuses (ValueError, naming it) a trajectory whose reward is not finite: JSON would hold it as null and
    the file would not read back. Escapes text that is not valid UTF-8 (`escape_invalid_text`)."""
    n = 0
    for g in groups:
        for i, t in enumerate(g.trajectories):
            r = t.reward
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
                raise ValueError(
                    f"group {n} trajectory {i} has reward {r!r}: a reward must be a finite number, refusing to store it"
                )
        escape_invalid_text(g)
        f.write(g.model_dump_json() + "\n")
        n += 1
    return n


def read_jsonl(f, path: str | None = None) -> list[TrajectoryGroup]:
    """Read groups written by `write_jsonl` (one per non-empty line); a line that does not read raises
    DamagedRollouts naming `path` and the line."""
    groups = []
    for number, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            with reading_stored():
                groups.append(TrajectoryGroup.model_validate(json.loads(line)))
        except ValueError as e:  # json.JSONDecodeError and pydantic's ValidationError are ValueErrors
            raise DamagedRollouts(_first_line(e), line=number, path=path) from e
    return groups


def _first_line(e: Exception) -> str:
    """A short reason: pydantic's first error (location and message) or the JSON error."""
    if isinstance(e, json.JSONDecodeError):  # its own "line 1" is the line's, not the file's
        return f"not JSON ({e.msg} at column {e.colno})"
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        return f"{loc}: {first.get('msg')}" if loc else str(first.get("msg"))
    return str(e).splitlines()[0][:300]
