"""No keyword is silently dropped: every public callable of art_core (what `art_core` and its public submodules
export) whose signature takes **kwargs either refuses a name it does not know, or is on the allow-list below
with where such names go. A new **kwargs signature fails this test until it is classified. No server."""

from __future__ import annotations

import importlib
import inspect
import typing
import warnings

import pydantic
import pytest

from tests.art_compat.test_art_module_paths import MODULE_PATHS

BOGUS = "surely_not_a_field"

# name -> where an unknown keyword goes (documented in docs/art-compatibility.md)
ALLOWED = {
    "art_core.envs.load_environment": "the environment's options model, which refuses unknown options",
    "art_core.langgraph.init_chat_model": "LangChain's ChatOpenAI keywords (max_tokens, stop, extra_body, ...)",
    "art_core.local_backend.LocalBackend.train": "ART's backend.train keywords, mapped by art_core.dev; the rest are "
    "named in a warning as having no counterpart",
    "art_core.model.Model.openai_client": "openai.AsyncOpenAI's own keywords (it refuses unknown ones)",
    "art_core.pipeline_trainer.PipelineTrainer.__init__": "ART's PipelineTrainer options without a counterpart, "
    "named in a warning",
    "art_core.rewards.config.resolve_judge": "litellm parameters for the judge call (extra_litellm_params)",
    "art_core.rewards.ruler.ruler": "JudgeConfig's options, which refuse unknown names",
    "art_core.rewards.ruler.ruler_score_group": "JudgeConfig's options, which refuse unknown names",
    "art_core.sft.train_sft_from_file": "TrainSFTConfig's fields, which refuse unknown names",
    "art_core.storage.Storage.__init__": "fsspec's options for the root's filesystem (s3fs: key, secret, "
    "endpoint_url, ...); LocalBackend refuses them for a local root",
    "art_core.trajectories.Trajectory.__init__": "kept as an attribute of that object only, not stored, named in a "
    "warning (ART's MCP-RL notebook passes scenario=); a near miss of a field is a TypeError",
    "art_core.trajectories.Trajectory.model_dump": "pydantic's model_dump options",
    "art_core.rewards.accounting.JudgeUsage": "a usage record art_core fills in and reads back from stored "
    "scenario sets (lenient on purpose)",
    "art_core.rewards.ruler.RulerResult": "a result art_core builds from the judge's validated reply",
    "art_core.rewards.ruler.TrajectoryScore": "a result art_core builds from the judge's validated reply",
    "art_core.MegatronBackend.__init__": "raises NotImplementedError on any call, saying why",
    "art_core.ServerlessBackend.__init__": "raises NotImplementedError on any call, saying why",
}
# ART's dev dicts (TypedDicts): art_core.dev reports each key without a counterpart in a warning.
DEV_DICTS = "art_core.dev."

REFUSERS = {
    "art_core.model.Model.__init__": lambda: __import__("art_core").Model(name="m", project="p", **{BOGUS: 1}),
    "art_core.model.TrainableModel.__init__": lambda: __import__("art_core").TrainableModel(
        name="m", project="p", base_model="/m", **{BOGUS: 1}
    ),
    "art_core.trajectories.History.__init__": lambda: __import__("art_core").History(**{BOGUS: 1}),
    "art_core.trajectories.TrajectoryGroup.__init__": lambda: __import__("art_core").TrajectoryGroup([], **{BOGUS: 1}),
    "art_core.trajectories.TrajectoryGroup.__new__": lambda: __import__("art_core").TrajectoryGroup([], **{BOGUS: 1}),
    "art_core.trajectories.RolloutError.__init__": lambda: __import__("art_core").RolloutError(
        type="E", message="m", traceback="t", **{BOGUS: 1}
    ),
    "art_core.training.result.TrainResult.__init__": lambda: __import__("art_core").TrainResult(step=1, **{BOGUS: 1}),
    "art_core.local_backend.LocalBackend.__init__": lambda: __import__("art_core").LocalBackend("/tmp/x", **{BOGUS: 1}),
}


def _targets() -> dict[str, object]:
    """Every callable with **kwargs defined by art_core and reachable from a public module path."""
    found: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path, _ in MODULE_PATHS:
            try:
                module = importlib.import_module(path)
            except (ImportError, NotImplementedError):
                continue
            names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
            for name in names:
                try:
                    obj = getattr(module, name)
                except (AttributeError, NotImplementedError):
                    continue
                candidates = []
                if inspect.isclass(obj) and obj.__module__.startswith("art_core"):
                    for attr in ("__init__", "__new__", *[a for a in vars(obj) if not a.startswith("_")]):
                        fn = inspect.getattr_static(obj, attr, None)
                        fn = getattr(fn, "__func__", fn)
                        if callable(fn) and (getattr(fn, "__module__", "") or "").startswith("art_core"):
                            candidates.append((f"{obj.__module__}.{obj.__qualname__}.{attr}", fn))
                    if issubclass(obj, pydantic.BaseModel) and "__init__" not in vars(obj):
                        candidates.append((f"{obj.__module__}.{obj.__qualname__}", obj))  # pydantic's own init
                    if typing.is_typeddict(obj):
                        candidates.append((f"{obj.__module__}.{obj.__qualname__}", obj))
                elif inspect.isfunction(obj) and obj.__module__.startswith("art_core"):
                    candidates.append((f"{obj.__module__}.{obj.__qualname__}", obj))
                for qualname, fn in candidates:
                    if inspect.isclass(fn):  # a pydantic model without its own init, or a TypedDict
                        found[qualname] = fn
                        continue
                    try:
                        params = inspect.signature(fn).parameters.values()
                    except (TypeError, ValueError):
                        continue
                    if any(p.kind is p.VAR_KEYWORD for p in params):
                        found[qualname] = fn
    return found


def test_every_kwargs_signature_refuses_or_says_where_names_go() -> None:
    unclassified = []
    for qualname, target in sorted(_targets().items()):
        if qualname in ALLOWED or qualname in REFUSERS or qualname.startswith(DEV_DICTS):
            continue
        if inspect.isclass(target) and issubclass(target, pydantic.BaseModel):
            if target.model_config.get("extra") == "forbid":
                continue  # pydantic refuses the unknown field
        unclassified.append(qualname)
    assert not unclassified, f"these take **kwargs and may drop a name silently: {unclassified}"


@pytest.mark.parametrize("qualname", sorted(REFUSERS))
def test_each_refuser_names_the_unknown_keyword(qualname: str) -> None:
    with pytest.raises((TypeError, pydantic.ValidationError), match=BOGUS):
        REFUSERS[qualname]()


def test_the_allow_list_names_only_signatures_that_exist() -> None:
    stale = [q for q in ALLOWED if q not in _targets()]
    assert not stale, f"allow-listed but no longer taking **kwargs (or gone): {stale}"
