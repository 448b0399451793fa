"""Calls to inference servers load the CA bundle once per process, not once per call or client.

httpx loads certifi's bundle (20-35 ms of CPU on a 2-core VM) for every client it builds, and
`httpx.get`/`post` build one per call; a training step made three such calls (art_core.inference.http_client).
"""

from __future__ import annotations

import http.server
import ssl
import threading

from art_core.inference import http_client
from art_core.inference.server import openai_client


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_admin_calls_and_rollout_clients_load_the_ca_bundle_once(monkeypatch):
    loads = []
    real = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(
        ssl.SSLContext, "load_verify_locations", lambda self, *a, **kw: (loads.append(a or kw), real(self, *a, **kw))[1]
    )
    http_client.tls_context.cache_clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/health"
        assert [http_client.get(url, timeout=5).status_code for _ in range(3)] == [200, 200, 200]
        for _ in range(3):
            openai_client(url, "key")
    finally:
        server.shutdown()
        server.server_close()
    assert len(loads) == 1, f"the CA bundle was loaded {len(loads)} times"
    assert http_client.tls_context() is http_client.tls_context()
