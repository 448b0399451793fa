"""MCP scenario sets kept in storage: what the `mcp` environment uses so a set is generated once per
(server, tool list, generator, seed), under `{root}/mcp_scenarios/{key}.json`, and a re-run or resumed run
reads it back and never generates again.

    collection = stored_scenarios(server, tools, resources, generate_options, store="s3://bucket/runs")
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from art_core.mcp.generate_scenarios import generate_scenarios
from art_core.mcp.types import GeneratedScenarioCollection

log = logging.getLogger(__name__)


def scenarios_key(server: str, tools: list[dict[str, Any]], resources: list[dict[str, Any]], generate: Any) -> str:
    """The stored set's key: a hash of the server, its tool and resource list, the generator and its seed.

    The generator's address is left out (the same model moved to another port still hits); no key is hashed."""
    spec = (
        generate.model_dump(exclude={"api_base", "max_retries"}) if hasattr(generate, "model_dump") else dict(generate)
    )
    blob = json.dumps(
        {"server": server, "tools": tools, "resources": resources, "generate": spec}, sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def scenarios_uri(store: str | None, key: str) -> str:
    from art_core.settings import get_settings
    from art_core.storage import Storage

    return Storage(store or get_settings().storage_root).join("mcp_scenarios", f"{key}.json")


def read_collection(uri: str) -> GeneratedScenarioCollection:
    """A stored collection (what `stored_scenarios` wrote, or any {"scenarios": [...]} JSON) at a path or URI."""
    from art_core.storage import Storage

    storage = Storage(uri.rsplit("/", 1)[0] or "/")
    if not storage.exists(uri):
        raise FileNotFoundError(f"no scenario collection at {uri}")
    return GeneratedScenarioCollection.from_json(storage.read_text(uri))


def stored_scenarios(
    server: str, tools: list[dict[str, Any]], resources: list[dict[str, Any]], generate: Any, store: str | None = None
) -> GeneratedScenarioCollection:
    """The scenarios for this (server, tools, generator, seed): read from storage, else generated once and stored.

    `generate` is an `art_core.envs.mcp.GenerateOptions`. The file holds the scenarios, their cost and what they
    were generated from; a run that finds it pays nothing."""
    from art_core.coroutines import run_sync
    from art_core.storage import Storage

    uri = scenarios_uri(store, scenarios_key(server, tools, resources, generate))
    storage = Storage(uri.rsplit("/", 2)[0])
    if storage.exists(uri):
        log.info("MCP scenarios for %s: reusing %s", server, uri)
        return GeneratedScenarioCollection.from_json(storage.read_text(uri))
    collection = run_sync(
        generate_scenarios(
            tools,
            resources,
            num_scenarios=generate.num_scenarios,
            custom_instructions=generate.custom_instructions,
            generator_model=generate.generator_model,
            generator_base_url=generate.api_base,
            seed=generate.seed,
            max_retries=generate.max_retries,
            litellm_params=generate.litellm_params,
        )
    )
    record = json.loads(collection.to_json())
    record.update(
        server=server, generator=generate.generator_model, seed=generate.seed, tools=[t["name"] for t in tools]
    )
    storage.write_text(uri, json.dumps(record, indent=1))
    log.info(
        "MCP scenarios for %s: generated %d with %s ($%.4f) -> %s",
        server,
        len(collection),
        generate.generator_model,
        collection.usage.cost_usd,
        uri,
    )
    return collection


__all__ = ["read_collection", "scenarios_key", "scenarios_uri", "stored_scenarios"]
