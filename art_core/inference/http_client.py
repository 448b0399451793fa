"""HTTP calls to inference servers, sharing one TLS context per process.

httpx builds a fresh SSL context for every client it makes, and `httpx.get`/`httpx.post` make a client per
call: each loads certifi's CA bundle, 20-35 ms of CPU on a 2-core VM, even for a plain-http loopback URL
that never uses it. A training step made three such calls (finding the server's model, loading the step's
adapter, the rollouts' OpenAI client), about 0.1 s a step, which the pipeline paid once more than a plain
loop. These helpers take httpx's own default context (certifi, or SSL_CERT_FILE / SSL_CERT_DIR as httpx
reads them), built once, the first time a call needs it.

    >>> from art_core.inference.http_client import get
    >>> get("http://127.0.0.1:8000/health", timeout=2.0).status_code   # doctest: +SKIP
    200
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying SSL context, made once per process (read the environment then)."""
    return httpx.create_ssl_context()


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.request` with the shared TLS context (pass `verify=` to use another)."""
    kwargs.setdefault("verify", tls_context())
    return httpx.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.get` with the shared TLS context."""
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    """`httpx.post` with the shared TLS context."""
    return request("POST", url, **kwargs)
