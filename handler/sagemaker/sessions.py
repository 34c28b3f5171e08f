"""SageMaker stateful sessions on `/invocations` (on with SAGEMAKER_ENABLE_STATEFUL_SESSIONS=true).

- `{"requestType": "NEW_SESSION"}` -> 200, `X-Amzn-SageMaker-New-Session-Id: <id>; Expires=<UTC>`;
- `{"requestType": "CLOSE"}` with `X-Amzn-SageMaker-Session-Id` -> 200,
  `X-Amzn-SageMaker-Closed-Session-Id: <id>`; without the header -> 424 (as vLLM answers);
- any other request with `X-Amzn-SageMaker-Session-Id` runs only when the session is open: an
  unknown, closed or expired id is a 400; `NEW_SESSION` as the header's value means no session.

The platform routes a session's requests to the instance that created it; the container only
mints ids and keeps their expiry. The store is MHCS's session manager (one directory per
session under SAGEMAKER_SESSIONS_PATH, /dev/shm by default), made to hold across the
API-server processes of a container: the directory, not one process's registry, says which
sessions exist.
"""

import os
import re
import time
from dataclasses import dataclass

from model_hosting_container_standards.sagemaker.sessions.manager import Session, SessionManager

from vllm_sagemaker.core import json_record
from vllm_sagemaker.core.errors import RequestError

SESSION_ID = b"x-amzn-sagemaker-session-id"
NEW_SESSION_ID = b"x-amzn-sagemaker-new-session-id"
CLOSED_SESSION_ID = b"x-amzn-sagemaker-closed-session-id"
NEW_SESSION = "NEW_SESSION"
CLOSE = "CLOSE"
REQUEST_TYPES = (NEW_SESSION, CLOSE)
# SageMaker's pattern and length limit for session ids (InvokeEndpoint's SessionId).
_SESSION_ID = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
_MAX_ID_LENGTH = 256

DISABLED = RequestError(
    400,
    "stateful sessions are not enabled on this endpoint "
    "(set SAGEMAKER_ENABLE_STATEFUL_SESSIONS=true)",
    "sessions_disabled",
)


@dataclass(frozen=True)
class SessionAnswer:
    """The whole answer to a session request."""

    body: bytes
    headers: list[tuple[bytes, bytes]]


def request_type(body: bytes) -> str | None:
    """NEW_SESSION or CLOSE when `body` is a session request, None for any other body (parsed
    only when it names `requestType`); a 400 when it has `requestType` but is not exactly
    one of the two."""
    if b'"requestType"' not in body:
        return None
    record = json_record.parse(body)
    if not isinstance(record, dict) or "requestType" not in record:
        return None
    kind = record["requestType"]
    if kind not in REQUEST_TYPES or len(record) != 1:
        raise RequestError(
            400,
            'a session request is exactly {"requestType": "NEW_SESSION"} or '
            '{"requestType": "CLOSE"}',
            "invalid_session_request",
            "requestType",
        )
    return kind


def expires_header(session_id: str, expires_at: float) -> bytes:
    """`<id>; Expires=YYYY-MM-DDTHH:MM:SSZ`, the format SageMaker requires."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))
    return f"{session_id}; Expires={stamp}".encode()


def session_error(message: str, session_id: str, code: str) -> RequestError:
    return RequestError(400, f"{message}: {session_id}", code, "X-Amzn-SageMaker-Session-Id")


class SharedSessions(SessionManager):
    """MHCS's manager, with the session directory as the registry shared by every process."""

    def _sync(self, session_id: str) -> None:
        """Make this process's registry agree with the directory about one session."""
        with self._lock:
            if not os.path.isdir(os.path.join(self.sessions_path, session_id)):
                self.sessions.pop(session_id, None)
            elif session_id not in self.sessions:
                session = Session(session_id, self.sessions_path)
                if session.expiration_ts is not None:
                    self.sessions[session_id] = session

    def get_session(self, session_id: str) -> Session | None:
        self._sync(session_id)
        return super().get_session(session_id)

    def close_session(self, session_id: str) -> None:
        self._sync(session_id)
        try:
            super().close_session(session_id)
        except OSError:
            raise ValueError(f"session not found: {session_id}") from None


class Sessions:
    """The session protocol over one store."""

    def __init__(self, expiration_s: int, path: str) -> None:
        self.store = SharedSessions(
            {"sessions_expiration": str(expiration_s), "sessions_path": path}
        )

    def open(self) -> SessionAnswer:
        session = self.store.create_session()
        expires = expires_header(session.session_id, float(session.expiration_ts or 0))
        return SessionAnswer(
            f"Session {session.session_id} created".encode(), [(NEW_SESSION_ID, expires)]
        )

    def close(self, session_id: str | None) -> SessionAnswer:
        if not session_id or session_id == NEW_SESSION:
            raise RequestError(
                424,
                "Failed to close session: send the session's id in X-Amzn-SageMaker-Session-Id",
                "missing_session_id",
                "X-Amzn-SageMaker-Session-Id",
            )
        self.check(session_id)
        try:
            self.store.close_session(session_id)
        except ValueError:
            raise session_error("session not found", session_id, "session_not_found") from None
        return SessionAnswer(
            f"Session {session_id} closed".encode(), [(CLOSED_SESSION_ID, session_id.encode())]
        )

    def check(self, session_id: str) -> None:
        """Return when the session is open; a 400 that says why when it is not."""
        if len(session_id) > _MAX_ID_LENGTH or not _SESSION_ID.fullmatch(session_id):
            raise session_error(
                "not a session id", session_id[:_MAX_ID_LENGTH], "invalid_session_id"
            )
        try:
            session = self.store.get_session(session_id)
        except ValueError:
            raise session_error("session not found", session_id, "session_not_found") from None
        if session is None:
            raise session_error("session expired", session_id, "session_expired")


def handle(
    sessions: Sessions | None, kind: str | None, session_id: str | None
) -> SessionAnswer | None:
    """The answer to a session request (`kind` NEW_SESSION or CLOSE), or None when the request
    goes on to the engine, after its session, if it names one, was found open."""
    in_session = session_id is not None and session_id != NEW_SESSION
    if kind is None and not in_session:
        return None
    if sessions is None:
        raise DISABLED
    if kind == NEW_SESSION:
        return sessions.open()
    if kind == CLOSE:
        return sessions.close(session_id)
    sessions.check(session_id or "")
    return None
