"""Stand-ins for what a command talks to, in this process: a worker's HTTP API
(FakeApi) and the client's Kafka producer (FakeProducer)."""

from __future__ import annotations

import asyncio
import socket
import threading
from types import SimpleNamespace
from typing import Any, Callable

import orjson
from aiohttp import web


class FakeApi:
    """An HTTP server on a thread of its own: `answer(request)` gives (status, document);
    every request's raw path and query is kept in `seen`."""

    def __init__(self, answer: Callable[[web.Request], tuple[int, Any]]):
        self.answer = answer
        self.seen: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    async def _handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.raw_path)
        status, doc = self.answer(request)
        body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
        return web.Response(body=body, status=status, content_type="application/json")

    def __enter__(self) -> FakeApi:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result(10)
        asyncio.run_coroutine_threadsafe(web.SockSite(self.runner, self.sock).start(), self.loop).result(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class FakeProducer:
    """Stands in for the client's aiokafka producer: keeps what is sent, acknowledges it at once."""

    def __init__(self) -> None:
        self.starts = 0
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> "asyncio.Future":
        self.sent.append((topic, key, value))
        acknowledged = asyncio.get_running_loop().create_future()
        acknowledged.set_result(SimpleNamespace(topic=topic, partition=3, offset=len(self.sent) + 40))
        return acknowledged

    async def stop(self) -> None:
        pass
