"""The web pages for people (`/ui/`): one page and its script and style, from
stream_app/web/, read once at start-up. The script reads the JSON API of the
same worker, which forwards what another worker owns, so the pages work
through any worker. Nothing comes from another host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from faust.web import Request, Response, View

WEB = Path(__file__).resolve().parent.parent / "web"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def _files() -> dict[str, tuple[bytes, str]]:
    """name -> (content, content type): the only names served, so no path reaches the disk."""
    return {path.name: (path.read_bytes(), TYPES[path.suffix]) for path in sorted(WEB.iterdir())
            if path.is_file() and path.suffix in TYPES}


def ui_routes(app: Any) -> None:
    """Register /ui/ (the page) and /ui/{name} (its files) on the Faust app."""
    files = _files()
    page = files["index.html"]

    @app.page("/ui")
    class Bare(View):
        async def get(self, request: Request) -> Response:
            # A typed /ui would otherwise be a 404: send it to the page.
            return self.bytes(b"", status=301, headers={"Location": "/ui/"})

    @app.page("/ui/")
    class Page(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(page[0], headers={"Content-Type": page[1], "Cache-Control": "no-cache"})

    @app.page("/ui/{name}")
    class File(View):
        async def get(self, request: Request, name: str) -> Response:
            found = files.get(name)
            if found is None:
                return self.bytes(b'{"error": "no such file"}', content_type="application/json", status=404)
            # The type in the header: aiohttp refuses a charset in `content_type`.
            return self.bytes(found[0], headers={"Content-Type": found[1], "Cache-Control": "no-cache"})
