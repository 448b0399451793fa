"""Runs that share a GPU queue for it instead of colliding: a Prefect global concurrency limit per device.

    with device_slot("gpu-0"):       # waits (logging that it waits, and for whom) until the slot is free
        ...                          # serve, roll out, train on the device

The limit is created with one slot the first time a run names it (`prefect gcl create gpu-0 --limit 2`
beforehand gives the device two). The slot is a lease that Prefect renews while the run lives; a run
that is killed (SIGKILL included) stops renewing it, and Prefect frees it when the lease expires.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Iterator

log = logging.getLogger(__name__)

LEASE_S = 120  # renewed while the run lives; a killed run's slot is free again after this long


def ensure_limit(name: str, slots: int = 1) -> int:
    """The global concurrency limit `name`, created with `slots` if missing; returns its slot count."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            return client.read_global_concurrency_limit_by_name(name).limit
        except ObjectNotFound:
            pass
        try:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))
        except ObjectAlreadyExists:  # another run created it first
            pass
        return client.read_global_concurrency_limit_by_name(name).limit


def _holders(name: str) -> int:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(name).active_slots


@contextlib.contextmanager
def device_slot(name: str | None, logger: logging.Logger | logging.LoggerAdapter | None = None) -> Iterator[float]:
    """Hold one slot of the device `name` for the block (None: no queue); yields the seconds waited."""
    if not name:
        yield 0.0
        return
    from prefect.concurrency.sync import concurrency

    logger = logger or log
    slots = ensure_limit(name)
    busy = _holders(name)
    if busy >= slots:
        logger.info("device %r is in use (%d of %d slots taken): this run waits for it", name, busy, slots)
    t0 = time.perf_counter()
    with concurrency(name, occupy=1, lease_duration=LEASE_S, strict=True):
        waited = time.perf_counter() - t0
        logger.info("device %r is this run's now (waited %.1f s)", name, waited)
        yield waited
