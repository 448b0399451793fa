"""Deploy a trained step: export its adapter with a model card to storage, or serve it with vLLM.

    uri = export_adapter(storage, "demo", "agent-001", step=3, base_model="/models/tiny")
    server = serve_adapter(storage, "demo", "agent-001", step=3, base_model="/models/tiny")
    server.base_url    # 'http://127.0.0.1:41234/v1', answering to model="agent-001"
"""

from art_core.deploy.export import export_adapter, model_card
from art_core.deploy.promotion import decide, promote, read_promoted
from art_core.deploy.serve import serve_adapter

__all__ = ["decide", "export_adapter", "model_card", "promote", "read_promoted", "serve_adapter"]
