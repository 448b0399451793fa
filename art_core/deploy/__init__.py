"""Deploy a trained step: `deploy_model` to vLLM, merged weights, Together or W&B; or export / serve it.

deployment = await deploy_model(deploy_to="merged", model=model, step=3)   # see art_core.deploy.deployment
uri = export_adapter(storage, "demo", "agent-001", step=3, base_model="/models/tiny")
server = serve_adapter(storage, "demo", "agent-001", step=3, base_model="/models/tiny")
server.base_url    # 'http://127.0.0.1:41234/v1', answering to model="agent-001"
"""

from art_core.deploy.deployment import deploy_model
from art_core.deploy.result import TARGETS, Deployment, DeployError, UnsupportedBaseModelError
from art_core.deploy.export import export_adapter, model_card
from art_core.deploy.promotion import decide, promote, read_promoted


def __getattr__(name: str):
    # Imported on use, so `python -m art_core.deploy.serve` runs the module once (no runpy warning).
    if name == "serve_adapter":
        from art_core.deploy.serve import serve_adapter

        return serve_adapter
    raise AttributeError(f"module 'art_core.deploy' has no attribute {name!r}")


__all__ = [
    "TARGETS",
    "DeployError",
    "Deployment",
    "UnsupportedBaseModelError",
    "decide",
    "deploy_model",
    "export_adapter",
    "model_card",
    "promote",
    "read_promoted",
    "serve_adapter",
]
