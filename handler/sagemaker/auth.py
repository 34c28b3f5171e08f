"""API keys for every route but the health and SageMaker metadata routes, and reading `/metrics`.

vLLM's own `--api-key` guards only /v1, /v2, /inference and /cohere; with a key configured, this
guard also covers /invocations, /score, /rerank, /classify, /pooling, /tokenize and the rest.
`/ping`, `/health` and `/execution-parameters` stay open: SageMaker calls them without a key.
So does a read (GET, HEAD) of `/metrics`: SageMaker's detailed observability scrapes it on port
8080 with no credentials. Any other method on `/metrics`, and any other path under it, needs
the key.
"""

import hashlib
import secrets
from collections.abc import Iterable

OPEN_PATHS = frozenset({"/ping", "/health", "/execution-parameters"})
METRICS_PATH = "/metrics"
READ_METHODS = frozenset({"GET", "HEAD"})


def is_open(method: str, path: str) -> bool:
    """Whether the request needs no key: a health or metadata route, a read of the metrics, or
    a CORS preflight."""
    return (
        path in OPEN_PATHS
        or (path == METRICS_PATH and method in READ_METHODS)
        or method == "OPTIONS"
    )


class ApiKeys:
    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def allows(self, method: str, path: str, authorization: bytes | None) -> bool:
        """Whether a request may pass: no keys configured, an open request (`is_open`), or
        `Authorization: Bearer <key>` with a configured key."""
        if not self._digests or is_open(method, path):
            return True
        scheme, _, token = (authorization or b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.strip().encode("latin-1")).digest()
        return any([secrets.compare_digest(digest, known) for known in self._digests])
