"""Stopping the worker's background tasks (the batch loop, a take-up, a standby)."""

from __future__ import annotations

import asyncio


async def cancel(task: asyncio.Future | None) -> None:
    """Cancel the task, if still running, and wait until it has stopped."""
    if task is not None and not task.done():
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
