"""A stand-in container the interrupt and one-output tests control, no engine needed: `/ping`
answers 503 until `ready` is set; mini-batches are answered at once (one answer line per line,
`{"echo": custom_id}` as the body), except that with `hold_after`, those after the first
`hold_after` are held until `release` is set, so a run has requests in flight by construction
for as long as the test wants. `held` counts the mini-batches waiting.

Not a test module: test_interrupts and test_one_output use it.
"""

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.support import waiting
from tests.support.local_http import serving


@dataclass
class Holding:
    hold_after: int | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    posts: int = 0
    held: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def holds(self) -> bool:
        """Whether this mini-batch waits for `release` (counted in `held` while it does)."""
        with self.lock:
            self.posts += 1
            if self.hold_after is None or self.posts <= self.hold_after:
                return False
            self.held += 1
            return True

    def until_held(self, count: int) -> None:
        """Until `count` mini-batches wait for `release`."""
        waiting.until(lambda: self.held >= count, 120, f"fewer than {count} requests held")


def answers(body: bytes) -> bytes:
    """One batch answer line per line of the mini-batch, in order."""
    lines = []
    for raw in body.splitlines():
        if not raw.strip():
            continue
        custom_id = json.loads(raw)["custom_id"]
        response = {"status_code": 200, "request_id": custom_id, "body": {"echo": custom_id}}
        answer = {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": response}
        lines.append(json.dumps({**answer, "error": None}).encode() + b"\n")
    return b"".join(lines)


def _handler(container: Holding) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if not container.ready.is_set():
                self.reply(503, b"")
            elif self.path == "/ping":
                self.reply(200, b"")
            else:
                self.reply(404, b"")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if container.holds():
                container.release.wait()
                with container.lock:
                    container.held -= 1
            with contextlib.suppress(OSError):  # a run stopped meanwhile has hung up
                self.reply(200, answers(body))

        def reply(self, status: int, content: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/jsonlines")
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    return Handler


@contextlib.contextmanager
def holding(ready: bool = True, hold_after: int | None = None) -> Iterator[tuple[str, Holding]]:
    """A `Holding` container (ready at once unless `ready` is False): its URL and its handle.
    Held requests are let go when the block ends."""
    container = Holding(hold_after=hold_after)
    if ready:
        container.ready.set()
    with serving(_handler(container)) as url:
        try:
            yield url, container
        finally:
            container.release.set()
