"""Server settings a user chooses reach the vLLM command line the same way through every door."""

from __future__ import annotations

import pytest

from art_core.inference.server import ServerConfig, ServerOptions, VLLMServer, cpu_has_bf16


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_the_dtype_suits_the_cpu_unless_the_user_names_one(monkeypatch):
    server = VLLMServer(ServerConfig(model="/models/m"))
    server.device = "cpu"
    monkeypatch.setattr("art_core.inference.server.cpu_has_bf16", lambda: False)
    assert _flag(server.command(), "--dtype") == "float32"  # AVX2-only CPU: bf16 would be emulated
    monkeypatch.setattr("art_core.inference.server.cpu_has_bf16", lambda: True)
    assert _flag(server.command(), "--dtype") is None  # native bf16: vLLM's own choice
    server.config = ServerConfig(model="/models/m", dtype="bfloat16")
    assert _flag(server.command(), "--dtype") == "bfloat16"
    server.device = "cuda"
    server.config = ServerConfig(model="/models/m")
    assert _flag(server.command(), "--dtype") is None


def test_cpu_has_bf16_reads_this_machine():
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    assert cpu_has_bf16() == ("avx512_bf16" in flags or "amx_bf16" in flags)


def test_prefix_caching_and_batch_size_are_passed_when_set():
    server = VLLMServer(
        ServerConfig(model="/models/m", enable_prefix_caching=True, max_num_seqs=16, max_model_len=2048)
    )
    args = server.command()
    assert "--enable-prefix-caching" in args and _flag(args, "--max-num-seqs") == "16"
    assert _flag(args, "--max-model-len") == "2048"
    off = VLLMServer(ServerConfig(model="/models/m", enable_prefix_caching=False)).command()
    assert "--no-enable-prefix-caching" in off
    assert not any("prefix-caching" in a for a in VLLMServer(ServerConfig(model="/models/m")).command())


def test_art_engine_args_set_the_same_fields():
    from art_core.dev import server_overrides

    out = server_overrides({"engine_args": {"dtype": "float32", "enable_prefix_caching": True, "max_num_seqs": 8}})
    assert out == {"dtype": "float32", "enable_prefix_caching": True, "max_num_seqs": 8}
    ServerConfig(model="/m", **out)  # they are ServerConfig fields


def test_the_prefect_form_has_the_server_settings_and_refuses_a_wrong_one(tiny_model_path):
    from art_pipeline.flows.config import RunConfig

    cfg = RunConfig(
        project="p",
        model="m",
        base_model=tiny_model_path,
        environment={"name": "word-quiz"},
        server={"dtype": "float32", "max_model_len": 4096},
    )
    assert cfg.server.model_dump(exclude_unset=True) == {"dtype": "float32", "max_model_len": 4096}
    assert "server" in RunConfig.model_json_schema()["properties"]
    with pytest.raises(ValueError, match="dtype"):
        RunConfig(
            project="p",
            model="m",
            base_model=tiny_model_path,
            environment={"name": "word-quiz"},
            server={"dtype": "fp8"},
        )
    assert isinstance(cfg.server, ServerOptions)


def test_a_run_with_other_server_settings_restarts_the_pools_server_with_them():
    """The pool's server is restarted with a run's settings (same port and key); unset fields keep it as it is."""
    from art_core.serving import ServerPool

    class FakeServer:  # records what the pool asks of it; starting vLLM is what the end-to-end tests do
        def __init__(self, config):
            self.config, self.restarts, self.base_url = config, 0, "http://127.0.0.1:1/v1"
            self.weight_swap = False  # VLLMServer's property: a LoRA server, whose rank the pool may widen

        def restart(self):
            self.restarts += 1

        def is_alive(self):
            return True

    pool = ServerPool()
    server = FakeServer(ServerConfig(model="/models/m"))
    pool._servers[("/models/m", 0)] = server
    pool._owned.add(id(server))
    assert pool.get("/models/m", options={}) is server and server.restarts == 0
    pool.get("/models/m", options=ServerOptions(dtype="float32"))
    assert server.restarts == 1 and server.config.dtype == "float32"
    pool.get("/models/m", options={"dtype": "float32"})
    assert server.restarts == 1  # the same settings: kept running


def test_closing_some_of_a_pools_servers_stops_only_those_it_started():
    """close(only=...) stops the named servers the pool started and forgets them; the others keep running."""
    from art_core.serving import ServerPool

    class FakeServer:
        def __init__(self, model):
            self.config, self.stopped = ServerConfig(model=model), False

        def stop(self):
            self.stopped = True

    pool = ServerPool()
    started, kept, adopted = FakeServer("/models/a"), FakeServer("/models/b"), FakeServer("/models/c")
    for server in (started, kept):
        pool._servers[(server.config.model, 0)] = server
        pool._owned.add(id(server))
    pool.adopt(adopted)
    pool.close(only=[started, adopted])
    assert pool.servers() == [kept] and started.stopped and not kept.stopped and not adopted.stopped
    pool.close()
    assert pool.servers() == [] and kept.stopped
