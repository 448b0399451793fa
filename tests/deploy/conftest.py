"""Fixtures for the deploy tests: a stored checkpoint with a random (output-changing) LoRA adapter, and a
local stand-in for Together's API.

    write_checkpoint(storage, "proj", "agent", 1, tiny_model_path)   # checkpoints/0001 with COMPLETE
    together_api.url                                                 # 'http://127.0.0.1:PORT/v1'

The stand-in implements the three endpoints Together's SDK calls for an adapter upload, as Together's
public API reference describes them (docs.together.ai/reference: "Upload a custom model or adapter",
"Get job status", "List all models"):
- POST /v1/models {model_name, model_source, model_type, base_model, description}
  -> {"data": {"job_id", "model_name", "model_id", "model_source"}, "message"}; like Together, it fetches
  `model_source` (the presigned S3 URL) and reads the archive;
- GET /v1/jobs/{job_id} -> {"type", "job_id", "status" (Queued, Running, Complete, Failed),
  "status_updates": [{"status", "message", "timestamp"}], "args": {"modelName", "modelSource",
  "description"}, "created_at", "updated_at"}; each call advances the job along `together_api.script`;
- GET /v1/models -> [{"id", "object": "model", "created", "type"}], the uploaded model listed once its
  job is Complete.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import threading
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ACCOUNT = "tester"  # Together prefixes an uploaded model's name with the account's


def write_checkpoint(storage, project: str, name: str, step: int, base_model: str, seed: int = 0) -> str:
    """Store a complete checkpoint `step` whose LoRA (r 8, random nonzero A and B) visibly changes the outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from art_core.store import ModelStore

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_model)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=targets, init_lora_weights=False))
    with torch.no_grad():  # peft's random init alone barely moves a random model's argmax
        for pname, p in peft_model.named_parameters():
            if "lora_B" in pname:
                p.normal_(0, 0.5)
    with tempfile.TemporaryDirectory() as tmp:
        peft_model.save_pretrained(tmp)
        with open(os.path.join(tmp, "optimizer.pt"), "wb") as f:  # trainer state: must never ship
            f.write(b"not for export")
        ModelStore(storage, project, name).bind(base_model)
        storage.put_dir(tmp, ModelStore(storage, project, name).checkpoint(step))
    return ModelStore(storage, project, name).checkpoint(step)


@dataclass
class TogetherAPI:
    url: str
    script: list[str] = field(default_factory=lambda: ["Queued", "Running", "Complete"])
    failure: str = "adapter_config.json: base model mismatch"
    requests: list[dict] = field(default_factory=list)  # method, path, auth, body
    archive_files: list[str] = field(default_factory=list)
    jobs: dict[str, dict] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    api: TogetherAPI

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def _send(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _record(self, body=None) -> None:
        self.api.requests.append(
            {"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self._record(body)
        if self.path != "/v1/models":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        with urllib.request.urlopen(body["model_source"], timeout=30) as r:  # Together fetches the archive itself
            with tarfile.open(fileobj=io.BytesIO(r.read()), mode="r:gz") as tar:
                self.api.archive_files = sorted(tar.getnames())
        job_id = f"job-{len(self.api.jobs) + 1}"
        name = f"{ACCOUNT}/{body['model_name']}"
        self.api.jobs[job_id] = {"name": name, "body": body, "polls": 0}
        self._send(
            200,
            {
                "data": {"job_id": job_id, "model_name": name, "model_id": f"model-{job_id}", "model_source": "s3"},
                "message": "Processing model weights. Job created.",
            },
        )

    def do_GET(self) -> None:
        self._record()
        if self.path.startswith("/v1/jobs/"):
            job = self.api.jobs.get(self.path.rsplit("/", 1)[-1])
            if job is None:
                return self._send(404, {"error": {"message": "job not found"}})
            status = self.api.script[min(job["polls"], len(self.api.script) - 1)]
            job["polls"] += 1
            job["status"] = status
            message = self.api.failure if status == "Failed" else f"{status.lower()}"
            now = "2026-11-25T14:00:00Z"
            return self._send(
                200,
                {
                    "type": "model_upload",
                    "job_id": self.path.rsplit("/", 1)[-1],
                    "status": status,
                    "status_updates": [{"status": status, "message": message, "timestamp": now}],
                    "args": {
                        "modelName": job["name"],
                        "modelSource": job["body"]["model_source"],
                        "description": job["body"]["description"],
                    },
                    "created_at": now,
                    "updated_at": now,
                },
            )
        if self.path.startswith("/v1/models"):
            listed = [j["name"] for j in self.api.jobs.values() if j.get("status") == "Complete"]
            models = [
                {"id": n, "object": "model", "created": 1764079200, "type": "chat"}
                for n in ["Qwen/Qwen2.5-72B-Instruct", *listed]
            ]
            return self._send(200, models)
        self._send(404, {"error": {"message": f"no route {self.path}"}})


@pytest.fixture
def together_api(monkeypatch):
    """The stand-in Together API on 127.0.0.1 (port 0), the SDK pointed at it; stopped after the test."""
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    api = TogetherAPI(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    handler.api = api
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("TOGETHER_BASE_URL", api.url)
    yield api
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
