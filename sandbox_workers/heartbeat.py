"""The host registers itself with the web app and heartbeats its pool's state into it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from sandbox_workers.pool import Pool

log = logging.getLogger(__name__)


async def heartbeat_once(
    session: aiohttp.ClientSession, pool: Pool, *, name: str, url: str, web_url: str, token: str, version: str
) -> None:
    """POST the pool's status to the web app; raises on failure."""
    payload = {"name": name, "api_url": url, "version": version, **pool.status()}
    async with session.post(
        web_url.rstrip("/") + "/api/v1/sandbox-hosts/heartbeat",
        json=payload,
        headers={"Authorization": f"Bearer {token}"},
        timeout=aiohttp.ClientTimeout(total=10),
    ) as resp:
        if resp.status != 200:
            raise RuntimeError(f"web app answered {resp.status}: {(await resp.text())[:300]}")


async def heartbeat_forever(
    pool: Pool, *, name: str, url: str, web_url: str, token: str, interval: float, version: str
) -> None:
    """Heartbeat every `interval` s; log the first failure and the recovery, not every miss."""
    failing = False
    async with aiohttp.ClientSession() as session:
        while True:
            started = time.monotonic()
            try:
                await heartbeat_once(
                    session, pool, name=name, url=url, web_url=web_url, token=token, version=version
                )
                if failing:
                    log.info("heartbeat to %s works again", web_url)
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:
                    log.warning("heartbeat to %s failed: %s (retrying every %.0f s)", web_url, exc, interval)
                failing = True
            await asyncio.sleep(max(0.1, interval - (time.monotonic() - started)))
