"""API keys for every route but the health and SageMaker metadata routes.

vLLM's own `--api-key` guards only /v1, /v2, /inference and /cohere; with a key configured, this
guard also covers /invocations, /score, /rerank, /classify, /pooling, /tokenize, /metrics and the
rest. `/ping`, `/health` and `/execution-parameters` stay open: SageMaker calls them without a key.
"""

import hashlib
import secrets
from collections.abc import Iterable

OPEN_PATHS = frozenset({"/ping", "/health", "/execution-parameters"})


class ApiKeys:
    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def allows(self, method: str, path: str, authorization: bytes | None) -> bool:
        """Whether a request may pass: no keys configured, an open path, a CORS preflight, or
        `Authorization: Bearer <key>` with a configured key."""
        if not self._digests or path in OPEN_PATHS or method == "OPTIONS":
            return True
        scheme, _, token = (authorization or b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.strip().encode("latin-1")).digest()
        return any([secrets.compare_digest(digest, known) for known in self._digests])
