"""The inference server the tasks sample from: a given URL, or one vLLM server per process, started lazily.

Started only when a task body first needs it, so a fully cached run never pays the server's start-up.
The server is a child process owned by its id and stopped at interpreter exit (art_core.inference).

    endpoint = endpoint_for("/models/tiny", inference_url=None)     # starts vLLM on 127.0.0.1
    name = served_name(endpoint, storage, "demo", "agent-001", step=2) # 'agent-001@2', adapter loaded
"""

from __future__ import annotations

import threading

from art_core.rollouts import Endpoint, discover_endpoint, load_adapter, local_checkpoint
from art_core.settings import get_settings
from art_core.storage import Storage

_SERVERS: dict[str, object] = {}
_LOCK = threading.Lock()


def endpoint_for(base_model: str, inference_url: str | None) -> Endpoint:
    """The endpoint at `inference_url` (key from ART_INFERENCE_API_KEY), else this process's own server."""
    if inference_url:
        key = get_settings().inference_api_key
        return discover_endpoint(inference_url, key.get_secret_value() if key else None)
    from art_core.inference.server import ServerConfig, VLLMServer

    with _LOCK:
        server = _SERVERS.get(base_model)
        if server is None or not server.is_alive():  # type: ignore[attr-defined]
            server = VLLMServer(ServerConfig(model=base_model, served_model_name="base")).start()
            _SERVERS[base_model] = server
            _logger().info("started a vLLM server for %s at %s (pid %s, log %s); it stops when this process exits",
                           base_model, server.base_url, server.pid, server.log_path)  # fmt: skip
    s = server  # a VLLMServer
    return Endpoint(base_url=s.base_url, api_key=s.api_key, base_name=s.served_model_name)  # type: ignore[attr-defined]


def served_name(endpoint: Endpoint, storage: Storage, project: str, name: str, step: int) -> str:
    """The served name to sample step `step` from: the base model at 0, else `name@step` with its adapter loaded.

    The adapter is (re)loaded from storage every time: another run may have loaded a different
    checkpoint under the same name on a shared server, and reloading costs about 10 ms.
    """
    if step == 0:
        return endpoint.base_name
    uri = storage.checkpoint_path(project, name, step)
    if not storage.is_complete(uri):
        raise FileNotFoundError(f"checkpoint {uri} is missing or incomplete: train step {step} first")
    lora = f"{name}@{step}"
    load_adapter(endpoint, lora, local_checkpoint(storage, uri))
    return lora


def _logger():
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        import logging

        return logging.getLogger(__name__)


def stop_servers() -> None:
    """Stop the servers this process started (tests and the demo call it; exit does it anyway)."""
    with _LOCK:
        for server in _SERVERS.values():
            server.stop()  # type: ignore[attr-defined]
        _SERVERS.clear()
