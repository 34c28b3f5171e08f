"""Small HTTP servers the tests stand up beside the real containers (stores, emulators, a
container that is still starting or stops mid-run)."""

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on a free port of 127.0.0.1, each request on its own thread; its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# The header of an AWS JSON call naming its operation (`SageMaker.DescribeTransformJob`).
TARGET = "X-Amz-Target"
# (operation, its parameters, moto's status, moto's body) -> the body to answer with.
Rewrite = Callable[[str, dict[str, Any], int, bytes], bytes]
HOP_BY_HOP = ("content-length", "transfer-encoding", "connection")


def forwarded(headers: Any) -> dict[str, str]:
    """A request's headers as an emulator sends them on to moto (its own Host and length)."""
    return {
        name: value
        for name, value in headers.items()
        if name.lower() not in ("host", "content-length")
    }


def in_front_of_moto(moto: str, rewrite: Rewrite) -> type[http.server.BaseHTTPRequestHandler]:
    """A handler that forwards each AWS JSON call to moto's server at `moto` and answers what
    moto answered, its body as `rewrite` makes it (an emulator adding what moto lacks)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = forwarded(self.headers)
            reply = httpx.post(moto + self.path, content=body, headers=headers, timeout=60)
            operation = self.headers.get(TARGET, "").rsplit(".", 1)[-1]
            params = json.loads(body or b"{}")
            content = rewrite(operation, params, reply.status_code, reply.content)
            self.send_response(reply.status_code)
            for name, value in reply.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    return Handler


@dataclass
class Front:
    """A container in front of a real one. Until the test sets `ready`, it is starting: every
    request is answered 503 (a SageMaker container's /ping while its engine loads), and `early`
    lists those other than /ping (a client that waits for a container makes none). Then every
    request goes to the real container as it is; with `posts_left`, only that many POSTs, and
    later ones are answered 500 (a container that stopped mid-run)."""

    target: str
    ready: threading.Event = field(default_factory=threading.Event)
    early: list[str] = field(default_factory=list)
    posts_left: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def may_post(self) -> bool:
        with self.lock:
            if self.posts_left is None:
                return True
            self.posts_left -= 1
            return self.posts_left >= 0


def _forwarding(front: Front) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.answer()

        def do_POST(self) -> None:
            self.answer()

        def answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not front.ready.is_set():
                if self.path != "/ping":
                    front.early.append(f"{self.command} {self.path}")
                self.reply(503, b"", "text/plain")
                return
            if self.command == "POST" and not front.may_post():
                self.reply(500, b"the container stopped", "text/plain")
                return
            headers = {
                name: value
                for name, value in self.headers.items()
                if name.lower() not in ("host", "content-length")
            }
            forwarded = httpx.request(
                self.command, front.target + self.path, content=body, headers=headers, timeout=600
            )
            self.reply(
                forwarded.status_code,
                forwarded.content,
                forwarded.headers.get("content-type", "application/octet-stream"),
            )

        def reply(self, status: int, content: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    return Handler


@contextlib.contextmanager
def fronting(target: str, **options: Any) -> Iterator[tuple[str, Front]]:
    """A `Front` (with `options`) for the container at `target`: its URL, and the handle the
    test drives."""
    front = Front(target, **options)
    with serving(_forwarding(front)) as url:
        yield url, front
