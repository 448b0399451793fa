"""The first hour in the Prefect UI (issue 36): forms that lead with what a newcomer changes, optional fields that
do not read as errors, bounds the form itself checks at the field, a reward curve that draws only what was
measured, and a demo whose closing lines name the command that re-runs it from the cache.

The form checks go through the session's real Prefect server (its /ui/schemas/validate, which the UI calls
before it submits a run); none starts vLLM.
"""

from __future__ import annotations

from typing import Any

import pytest

# What Prefect 3.7.6's UI (prefect-ui-library's schema mapper) keeps of a parameter schema when it asks the server
# to validate a form: these keys at every level of `properties` and `definitions`; `anyOf`, `allOf` and `items`
# pass through whole. Everything else (`minimum`, `exclusiveMinimum`, `maxLength`, `pattern`...) is dropped.
UI_KEYS = {
    "position", "block_type_slug", "$ref", "anyOf", "allOf", "example", "default", "const", "description", "enum",
    "format", "items", "prefixItems", "properties", "required", "title", "type", "maxItems", "minItems",
    "definitions",
}  # fmt: skip


def _as_the_ui_sends(schema: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in schema.items() if k in UI_KEYS}
    for key in ("properties", "definitions"):
        if key in out:
            out[key] = {name: _as_the_ui_sends(p) for name, p in out[key].items()}
    return out


def _schema(flow) -> dict[str, Any]:
    from prefect.utilities.callables import parameter_schema

    return parameter_schema(flow).model_dump()


def _by_position(props: dict[str, Any]) -> list[str]:
    return [name for name, _ in sorted(props.items(), key=lambda kv: kv[1].get("position", 0))]


def test_the_train_form_leads_with_what_a_newcomer_changes():
    from art_core.envs import SHIPPED
    from art_pipeline.flows.train import train

    defs = _schema(train)["definitions"]
    run = defs["RunConfig"]["properties"]
    order = _by_position(run)
    assert order[:6] == ["project", "model", "base_model", "environment", "steps", "train"]
    expert = [n for n in order if run[n].get("title", "").startswith("Expert: ")]
    assert expert == order[-len(expert) :] and {"server", "scale", "max_steps_off_policy"} <= set(expert)
    assert "project" not in expert and "learning_rate" not in expert
    train_fields = defs["TrainConfig"]["properties"]
    assert _by_position(train_fields)[0] == "learning_rate"
    assert train_fields["kimi_k2_tau"]["title"].startswith("Expert: ")
    assert train_fields["packed_attention"]["title"].startswith("Expert: ")
    assert len({p["position"] for p in train_fields.values()}) == len(train_fields)  # one order, no ties
    environment = defs["EnvironmentConfig"]["properties"]["name"]["description"]
    assert all(name in environment for name in SHIPPED), environment  # word-quiz and price-lookup included


def _properties(schema: dict[str, Any]):
    for section in [schema, *schema.get("definitions", {}).values()]:
        for name, prop in section.get("properties", {}).items():
            yield f"{section.get('title', 'config')}.{name}", prop


def test_optional_fields_do_not_read_as_errors():
    """Prefect draws `X | None` as a choice between X and a 'Property is type "None"' note: a scalar that
    defaults to None is a plain input left empty instead, its placeholder saying what empty means."""
    from art_pipeline.flows.deploy import deploy_flow
    from art_pipeline.flows.mcp import train_mcp
    from art_pipeline.flows.retrain import retrain
    from art_pipeline.flows.sft import sft
    from art_pipeline.flows.train import train

    for flow in (train, sft, train_mcp, deploy_flow, retrain):
        for name, prop in _properties(_schema(flow)):
            branches = prop.get("anyOf", [])
            if not any(b.get("type") == "null" for b in branches):
                continue
            # Left as a choice: a section that is on or off (the judge, SFT), or a value whose default is not None.
            others = [b for b in branches if b.get("type") != "null"]
            assert (
                "$ref" in others[0] or prop.get("default") is not None or others[0].get("type") in ("object", "array")
            ), name
            (none,) = [b for b in branches if b.get("type") == "null"]
            assert none.get("title", "").startswith("None: "), f"{name}: the None choice should say what it means"
    max_tokens = _schema(train)["definitions"]["SamplingConfig"]["properties"]["max_tokens"]
    assert "anyOf" not in max_tokens and "default" not in max_tokens
    assert max_tokens["example"].startswith("empty: the environment's recommendation")


@pytest.mark.parametrize(
    "change, field",
    [
        ({"train": {"learning_rate": -0.001}}, ["config", "train", "learning_rate"]),
        ({"steps": 0}, ["config", "steps"]),
        ({"group_size": 1}, ["config", "group_size"]),
        ({"sampling": {"max_tokens": 0}}, ["config", "sampling", "max_tokens"]),
        ({"project": ""}, ["config", "project"]),
    ],
)
def test_the_form_refuses_a_bad_value_at_its_field(prefect_api, change, field):
    """What the UI sends to /ui/schemas/validate before submitting a run: the error comes back at the field
    (the form shows it there), not only as the server's refusal to create the run (a toast)."""
    import httpx

    from art_pipeline.flows.overrides import deep_merge
    from art_pipeline.flows.train import train
    from tests.pipeline.test_ui_frictions import _prefect_yaml

    schema = _as_the_ui_sends(_schema(train))
    config = _prefect_yaml()["definitions"]["run"]

    def errors(values):
        r = httpx.post(f"{prefect_api}/ui/schemas/validate", json={"schema": schema, "values": values}, timeout=30)
        r.raise_for_status()
        return r.json()

    assert errors({"config": config})["valid"], "the deployment's own defaults must pass"
    found = errors({"config": deep_merge(config, change)})
    assert not found["valid"]
    level = found["errors"]
    for name in field:  # walk down the error tree: [{"property": ..., "errors": [...]}]
        (entry,) = [e for e in level if isinstance(e, dict) and e["property"] == name]
        level = entry["errors"]
    assert level and all(isinstance(e, str) for e in level), level


def test_reward_curve_draws_evaluations_as_points_not_a_line():
    """Two evaluations (step 0 and step 8) are two points: nothing drawn between them suggests a steady rise."""
    import io

    from PIL import Image

    from art_core.reporting import reward_curve_png

    rows = [{"step": 0, "val/reward": 0.1}, {"step": 8, "val/reward": 0.9}]
    img = Image.open(io.BytesIO(reward_curve_png(rows))).convert("RGB")
    orange = [
        (x, y) for x in range(img.width) for y in range(img.height) if _near(img.getpixel((x, y)), (255, 127, 14))
    ]
    xs = sorted({x for x, _ in orange})
    assert orange and xs[0] < img.width * 0.3 and xs[-1] > img.width * 0.7  # both points drawn
    # Between the two markers (the middle third of the width) nothing orange but the legend's sample.
    middle = [(x, y) for x, y in orange if img.width / 3 < x < 2 * img.width / 3]
    legend_rows = {y for x, y in middle}
    assert len(legend_rows) <= 14, f"a line joins the evaluations: {len(middle)} orange pixels mid-chart"

    joined = reward_curve_png([{"step": s, "train/reward": s / 10} for s in range(1, 9)])
    blue = Image.open(io.BytesIO(joined)).convert("RGB")
    mid = [y for y in range(blue.height) if _near(blue.getpixel((blue.width // 2, y)), (31, 119, 180))]
    assert mid, "the train reward, measured at every step, stays a line"


def _near(rgb, target, tolerance: int = 40) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(rgb, target))


def test_demo_names_the_command_that_reruns_it_from_the_cache(tmp_path, capsys):
    from types import SimpleNamespace

    from art_pipeline.flows.demo import print_summary, real_demo_config, rerun_command

    assert rerun_command(["--real"]) == "make demo" and rerun_command([]) == "make demo-tiny"
    assert rerun_command(["--real", "--seed", "1", "--fresh"]) == "python -m flows.demo --real --seed 1"

    config = real_demo_config("smollm2", str(tmp_path))
    report = SimpleNamespace(step=0, reward=0.06, pass_k={1: 0.0, 2: 0.0, 3: 0.0})
    final = SimpleNamespace(step=8, reward=0.49, pass_k={1: 0.3, 2: 0.1, 3: 0.0})
    summary = SimpleNamespace(rewards={8: 0.5}, trained_steps=[], model_path=str(tmp_path))
    print_summary(config, summary, report, final, 10.0, None, "make demo")
    out = capsys.readouterr().out
    assert "run `make demo` again: it finishes from the cache" in out
    assert "`python -m flows.demo` again" not in out  # that is the tiny demo, which trains from scratch
    assert "python -m flows.demo --real --steps 12" in out
    assert "under Runs and Artifacts" not in out and "/artifacts" in out  # Prefect 3.7.6 has no Artifacts sidebar entry
