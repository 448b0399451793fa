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


async def test_log_records_a_split_in_history_and_its_trajectories(tmp_path):
    from art_core import Trajectory, TrajectoryGroup
    from art_core.reporting import read_history
    from art_core.storage import Storage
    from art_core.store import ModelStore

    backend = RecordingBackend()
    backend.storage = Storage(str(tmp_path))
    backend.model_store = lambda m: ModelStore(backend.storage, m.project, m.storage_name)  # where log writes
    model = TrainableModel(name="agent-1", project="retail", base_model="/m")
    await model.register(backend)
    groups = [TrajectoryGroup([Trajectory(reward=1.0, metrics={"win": 1}), Trajectory(reward=0.0, metrics={"win": 0})])]
    logged = await model.log(groups, split="train", metrics={"loss": 0.25, "train/grad_norm": 2.0}, step=4)
    assert logged == {
        "train/exception_rate": 0.0,
        "train/reward": 0.5,
        "train/reward_std_dev": 0.5,
        "train/win": 0.5,
        "train/loss": 0.25,
        "train/grad_norm": 2.0,
    }
    await model.log([Trajectory(reward=0.75), ValueError("broke")])  # loose trajectories: one val group, step 3
    history = read_history(backend.storage, "retail", "agent-1")
    assert [(r["step"], r.get("train/reward"), r.get("val/reward"), r.get("val/exception_rate")) for r in history] == [
        (4, 0.5, None, None),
        (3, None, 0.75, 0.5),
    ]
    assert backend.storage.exists(ModelStore(backend.storage, "retail", "agent-1").trajectories("val", 3))

    gpt = Model(name="openai/gpt-4.1", project="retail")
    await gpt.register(backend)
    await gpt.log([Trajectory(reward=0.25)], split="val")
    assert read_history(backend.storage, "retail", "openai--gpt-4.1")[0]["val/reward"] == 0.25


async def test_model_train_takes_arts_keywords():
    backend = RecordingBackend()
    seen = {}

    async def train(model, groups, config=None):
        seen["config"] = config
        return TrainResult(step=5)

    backend.train = train
    model = TrainableModel(name="agent-1", project="retail", base_model="/m")
    await model.register(backend)
    from art_core import TrainConfig

    result = await model.train(
        trajectory_groups=[], config=TrainConfig(learning_rate=1e-4), _config={"epsilon": 0.3}, verbose=True
    )
    assert result.step == 5 and model.get_inference_name() == "agent-1@5"
    assert (seen["config"].learning_rate, seen["config"].epsilon) == (1e-4, 0.3)


def test_local_backend_accepts_arts_in_process_switch_and_says_it_changes_nothing(tmp_path, caplog):
    import logging

    from art_core.local import LocalBackend

    with caplog.at_level(logging.WARNING, logger="art_core.local_backend"):
        backend = LocalBackend(path=str(tmp_path), in_process=True)
    assert backend.storage.root == str(tmp_path)
    assert "in_process" in caplog.text


async def test_run_name_is_the_runs_identity_in_storage_and_the_name_stays_the_served_one(tmp_path):
    """ART 0.5.20: TrainableModel(run_name=...) owns the run's records (checkpoints, history, trajectories, W&B run);
    `name` is what is served. Without it, today's layout: the name's folder."""
    from art_core import Trajectory
    from art_core.storage import Storage
    from art_core.store import ModelStore

    backend = RecordingBackend()
    backend.storage = Storage(str(tmp_path))
    backend.model_store = lambda m: ModelStore(backend.storage, m.project, m.storage_name)
    runs = [TrainableModel(name="agent", project="retail", base_model="/m", run_name=r) for r in ("lr-a", "lr-b")]
    plain = TrainableModel(name="agent", project="retail", base_model="/m")
    for i, model in enumerate([*runs, plain]):
        await model.register(backend)
        await model.log([Trajectory(reward=float(i))], split="val", step=1)
        assert model.get_inference_name(step=1) == "agent@1"  # served under the name, whatever the run
    for folder, reward in [("lr-a", 0.0), ("lr-b", 1.0), ("agent", 2.0)]:
        (record,) = ModelStore(backend.storage, "retail", folder).read_history()
        assert record["val/reward"] == reward
    with pytest.raises(ValueError, match="run_name"):
        TrainableModel(name="agent", project="retail", base_model="/m", run_name="../escape")


def test_unknown_keywords_are_refused_and_arts_unused_fields_are_named(recwarn):
    with pytest.raises(TypeError, match=r"\['base_modle'\].*accepts.*'base_model'"):
        TrainableModel(name="agent", project="retail", base_modle="/m")
    with pytest.raises(TypeError, match="'nmae'"):
        Model(nmae="gpt", project="retail")
    model = TrainableModel(name="agent", project="retail", base_model="/m", entity="team", base_path=".art")
    assert model.storage_name == "agent"
    assert {str(w.message).split("(")[1].split("=")[0] for w in recwarn} == {"entity", "base_path"}
