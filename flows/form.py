"""The Prefect form drawn from a flow's config: field order, expert settings last, bounds the form checks.

flows/config.py's sections call `shape_form` from their JSON-schema hook (`_Strict.__get_pydantic_json_schema__`),
so every config's schema, and the deployment forms Prefect draws from it, come out arranged.

Prefect 3.7.6's UI draws a deployment's form from the parameter schema, ordering each object's fields by
`position` (0 when missing). Before it asks the server to validate the form, it copies the schema keeping
only some keys: `minimum`, `exclusiveMinimum`, `maximum`, `minLength` and `pattern` are dropped, while
`allOf` goes through whole. So a bound stated as usual is checked only when the run is created (a toast at
the bottom of the page); inside `allOf` the form checks it and shows the error at the field. And an
optional field (`X | None`, default None) is drawn as a choice between X and "None", whose text 'Property
is type "None"' reads like an error: a scalar one is drawn as a plain input instead, empty meaning None.
"""

from __future__ import annotations

import re
from typing import Any

_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern")
EXPERT = "Expert: "
# Sections of other components, drawn inside these forms: (fields first, fields last as expert settings).
_FOREIGN_FORMS: dict[str, tuple[tuple[str, ...], tuple[str, ...] | None]] = {
    # None: every field not listed first is an expert setting.
    "TrainConfig": (("learning_rate", "old_logprobs", "lora_rank", "lora_alpha", "seed"), None),
}


def shape_form(schema: dict[str, Any], handler: Any, first=(), expert=()) -> None:
    """Arrange one object's schema for Prefect's form, in place: `first` fields first, `expert` ones last and
    titled "Expert: ...", bounds where the form checks them, optional scalars as plain inputs. The sections of
    other components it holds are arranged too (in the order of _FOREIGN_FORMS where it names them)."""
    props = schema.get("properties") or {}
    if expert is None:
        expert = tuple(n for n in props if n not in first)
    order = [n for n in first if n in props]
    order += [n for n in props if n not in order and n not in expert] + [n for n in expert if n in props]
    for position, name in enumerate(order):
        prop = props[name]
        prop["position"] = position
        if name in expert and not str(prop.get("title", "")).startswith(EXPERT):
            prop["title"] = EXPERT + str(prop.get("title") or name.replace("_", " ").capitalize())
        _optional_as_empty(prop)
        _bounds_where_the_form_checks_them(prop)
        for ref in _refs(prop):
            target = handler.resolve_ref_schema({"$ref": ref})
            # Sections of flows/config.py were arranged by their own hook (their fields have positions); others now.
            if not any("position" in p for p in (target.get("properties") or {}).values()):
                shape_form(target, handler, *_FOREIGN_FORMS.get(target.get("title"), ((), ())))


def _refs(prop: dict[str, Any]) -> list[str]:
    branches = [prop, *prop.get("anyOf", []), *prop.get("allOf", [])]
    return [b["$ref"] for b in branches if "$ref" in b]


def _none_means(description: str) -> str:
    """What a field's description says None (or leaving it empty) does, for the form to show."""
    for cue in (r"\bNone\b(?: means|:|,)?", r"\b[Ll]eave empty:", r"\b[Dd]efault:"):
        found = re.search(cue + r"\s*(.+?)(?:\.\s|\.$|;|$)", description or "")
        if found:
            return found.group(1)
    return "not set"


def _optional_as_empty(prop: dict[str, Any]) -> None:
    branches = prop.get("anyOf") or []
    nulls = [b for b in branches if b.get("type") == "null"]
    others = [b for b in branches if b.get("type") != "null"]
    if not nulls or len(others) != 1:
        return
    meaning = _none_means(prop.get("description", ""))
    if "$ref" in others[0] or others[0].get("type") in ("object", "array") or prop.get("default", None) is not None:
        nulls[0].setdefault("title", f"None: {meaning}")  # the choice's label says what None does
        return
    # A scalar that defaults to None: a plain input, left empty for None (the form then leaves it out).
    del prop["anyOf"]
    prop.pop("default", None)
    prop.update({k: v for k, v in others[0].items() if k not in _BOUNDS})
    bounds = {k: v for k, v in others[0].items() if k in _BOUNDS}
    if bounds:
        prop["allOf"] = [{"type": others[0].get("type"), **bounds}] if "type" in others[0] else [bounds]
    prop["example"] = f"empty: {meaning}"  # the input's placeholder


def _bounds_where_the_form_checks_them(prop: dict[str, Any]) -> None:
    bounds = {k: prop.pop(k) for k in _BOUNDS if k in prop}
    if bounds:
        prop.setdefault("allOf", []).append({"type": prop["type"], **bounds} if "type" in prop else bounds)
