"""Deploy a trained step: export its adapter with a model card to storage, or serve it with vLLM.

    uri = export_adapter(storage, "demo", "agent-001", step=3, base_model="/models/tiny")
    server = serve_adapter(storage, "demo", "agent-001", step=3, base_model="/models/tiny")
    server.base_url    # 'http://127.0.0.1:41234/v1', answering to model="agent-001"
"""

from art_core.deploy.export import export_adapter, model_card
from art_core.deploy.promotion import decide, promote, read_promoted


def __getattr__(name: str):
    # Imported on use, so `python -m art_core.deploy.serve` runs the module once (no runpy warning).
    if name == "serve_adapter":
        from art_core.deploy.serve import serve_adapter

        return serve_adapter
    raise AttributeError(f"module 'art_core.deploy' has no attribute {name!r}")


__all__ = ["decide", "export_adapter", "model_card", "promote", "read_promoted", "serve_adapter"]
