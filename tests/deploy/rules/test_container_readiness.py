"""What `batch` makes of a container, with no container: what a ping says (starting, worth a
wait, or nobody there, failing at once), which URLs are unfit, and when a stop names --resume."""

import socket
import ssl

import httpx
import pytest

from vllm_sagemaker.deploy.base import invocations
from vllm_sagemaker.deploy.base.invocations import Readiness
from vllm_sagemaker.deploy.batch.run import stopped


def caused(error: Exception, cause: BaseException) -> Exception:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("outcome", "state", "why"),
    [
        (200, Readiness.READY, "HTTP 200 on /ping"),
        # the engine is loading, or a proxy in front waits for the container
        (503, Readiness.STARTING, "HTTP 503 on /ping"),
        (502, Readiness.STARTING, "HTTP 502 on /ping"),
        (504, Readiness.STARTING, "HTTP 504 on /ping"),
        # something answers, but not a container: no wait makes it one
        (404, Readiness.NOBODY, "HTTP 404 on /ping"),
        (401, Readiness.NOBODY, "HTTP 401 on /ping"),
        # connected, no answer yet (vLLM binds its port before its server accepts)
        (httpx.ReadTimeout("timed out"), Readiness.STARTING, "no answer to /ping in time"),
        # closed unanswered (Docker's port proxy before the container listens)
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            Readiness.STARTING,
            "the connection closed without an answer",
        ),
        (
            httpx.ReadError("[Errno 104] Connection reset by peer"),
            Readiness.STARTING,
            "the connection closed without an answer",
        ),
        (
            caused(
                httpx.ConnectError("All connection attempts failed"),
                ConnectionRefusedError(111, "Connect call failed"),
            ),
            Readiness.NOBODY,
            "connection refused",
        ),
        (
            caused(
                httpx.ConnectError("[Errno -2] Name or service not known"),
                socket.gaierror(-2, "Name or service not known"),
            ),
            Readiness.NOBODY,
            "host not found: Name or service not known",
        ),
        (
            caused(
                httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number"),
                ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            ),
            Readiness.NOBODY,
            "TLS failed ([SSL: WRONG_VERSION_NUMBER] wrong version number): is it http:// "
            "rather than https://?",
        ),
        (
            httpx.ConnectTimeout("timed out"),
            Readiness.NOBODY,
            "no connection in time: is the host up and the port open?",
        ),
        (
            httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'."),
            Readiness.NOBODY,
            "Request URL has an unsupported protocol 'ftp://'.",
        ),
    ],
)
def test_what_a_ping_says_of_a_container(
    outcome: int | Exception, state: Readiness, why: str
) -> None:
    """Starting is worth a wait; nobody there is not, and fails at once."""
    assert invocations.readiness(outcome) == (state, why)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://localhost:8080", None),
        ("https://runtime.example.com/", None),
        ("http://[::1]:8080", None),
        ("127.0.0.1:18931", "it has no scheme: write http://127.0.0.1:18931"),
        ("localhost:8080", "it has no scheme: write http://localhost:8080"),
        ("ftp://host/", "ftp:// is not http:// or https://"),
        ("http://", "it has no host"),
        ("http://[::1", "it is not a URL (Invalid port: ':1')"),
    ],
)
def test_what_makes_a_url_unfit_for_a_container(url: str, problem: str | None) -> None:
    assert invocations.url_problem(url) == problem


@pytest.mark.parametrize(
    ("answered", "line"),
    [
        (0, "no container at http://x (connection refused)"),
        (
            96,
            "no container at http://x (connection refused); 96 lines are answered and kept: run "
            "the same command with --resume to finish",
        ),
    ],
)
def test_resume_is_named_only_when_answers_are_kept(answered: int, line: str) -> None:
    """With no answer written, --resume would do what a plain run does."""
    error = invocations.NotReady("no container at http://x (connection refused)")
    assert str(stopped(error, answered)) == line
