"""Model API: names validated with a message naming the rule; register is idempotent; inference names."""

import pytest

from art_core import Backend, Model, TrainableModel, TrainResult


class RecordingBackend(Backend):
    """A minimal Backend that serves nothing; it records calls so the Model API contract can be checked."""

    def __init__(self) -> None:
        self.registered = 0

    async def register(self, model):
        self.registered += 1
        model.inference_base_url = "http://127.0.0.1:1/v1"
        model.inference_api_key = "secret"
        model.inference_model_name = model.name

    async def get_step(self, model):
        return 3

    async def train(self, model, groups, config=None):
        return TrainResult(step=4)


@pytest.mark.parametrize("bad", ["", "a/b", "..", "a..b", "x\\y", "-lead", "sp ace"])
def test_bad_names_are_refused_with_the_rule(bad):
    with pytest.raises(ValueError, match="letters, digits|non-empty"):
        TrainableModel(name=bad, project="p", base_model="/m")
    with pytest.raises(ValueError, match="letters, digits|non-empty"):
        Model(name="ok", project=bad)


async def test_register_is_idempotent_and_fills_the_endpoint():
    backend = RecordingBackend()
    model = TrainableModel(name="agent-1", project="retail", base_model="/m")
    await model.register(backend)
    await model.register(backend)
    assert backend.registered == 1
    client = model.openai_client()
    assert str(client.base_url).startswith("http://127.0.0.1:1/v1")
    assert await model.get_step() == 3
    assert model.get_inference_name() == "agent-1@3"
    assert model.get_inference_name(step=0) == "agent-1@0"
    assert (await model.train([])).step == 4 and model.get_inference_name() == "agent-1@4"


def test_secret_key_is_not_serialized():
    model = Model(name="judge", project="p", inference_api_key="sk-secret")
    assert "sk-secret" not in model.model_dump_json()
    assert "sk-secret" not in repr(model)


def test_unregistered_model_says_what_to_do():
    model = TrainableModel(name="a", project="p", base_model="/m")
    with pytest.raises(RuntimeError, match="register"):
        model.openai_client()
    with pytest.raises(RuntimeError, match="await model.register"):
        model.backend
