"""One writer per model through the Prefect door: while another process holds the model's lease, the train
and sft flows are refused before any work (no server started, nothing written), naming the holder.

A real Prefect test server and the tiny model; no vLLM (the refused runs never reach it). The lease itself,
on local and S3 storage, is tests/test_lease.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.pipeline.test_one_engine import run_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HOLDER = """
import sys, time
from art_core.lease import acquire_model_lease
from art_core.store import ModelStore

lease = acquire_model_lease(ModelStore(sys.argv[1], "engine", "agent"), run_id="run-a", run="the running flow")
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding engine/agent's lease under tmp_path/art; stopped by its pid at the end."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "art")], cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"held"
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()


def test_a_second_run_of_a_model_is_refused_before_any_work(prefect_api, tmp_path, tiny_model_path, holder):
    from art_core.lease import LeaseHeld
    from art_core.serving import PROCESS_POOL
    from art_core.store import ModelStore
    from art_pipeline.flows.sft import SFTRunConfig, sft
    from art_pipeline.flows.train import train

    root = str(tmp_path / "art")
    store = ModelStore(root, "engine", "agent")
    with pytest.raises(LeaseHeld) as e:
        train(run_config(tiny_model_path, root, None, "agent"))  # no inference_url: it would start a server
    message = str(e.value)
    assert "engine/agent" in message and "run-a (the running flow)" in message and f"pid {holder.pid}" in message
    assert "ART_LEASE_TAKEOVER=1" in message
    assert PROCESS_POOL.servers() == [], "a server was started for a run that was refused"
    assert not os.path.exists(store.model_json) and not os.path.exists(store.path("trajectories"))

    data = tmp_path / "chat.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    with pytest.raises(LeaseHeld, match="run-a"):
        sft(SFTRunConfig(storage_url=root, project="engine", model="agent", base_model=tiny_model_path, data=str(data)))
    assert not os.path.exists(store.model_json) and not os.path.exists(store.path("checkpoints"))
