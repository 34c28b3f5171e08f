"""Why the server stops, and the exit status that says so.

vLLM stops its HTTP server by itself a few seconds after its engine dies and then exits 0, the
status of a clean stop: Docker's `--restart on-failure`, Kubernetes Jobs and supervisors read it
as "finished". A clean stop is one somebody asked for with SIGTERM or SIGINT. `StopRequests`
notes those signals (and passes each on to vLLM's own handler); a server that stops, or an
engine that is found dead, without one is a failure and the process exits with status 1.
`serve` then starts vLLM again (`container.supervisor`) and tells it how often it has, which
`/metrics` shows.
"""

import os
import signal
from collections.abc import Callable
from types import FrameType

from prometheus_client import Gauge

from vllm_sagemaker.handler.process.logs import logger

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
FAILED = 1

RESTARTS = Gauge(
    "vllm_sagemaker:server_restarts",
    "Times serve has started vLLM again after it failed, since the container started.",
    # every API-server process holds the same count: one series, not one per process
    multiprocess_mode="max",
)

Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class StopRequests:
    """Whether this process has been asked to stop."""

    def __init__(self) -> None:
        self.requested = False

    def watch(self) -> None:
        """Note SIGTERM and SIGINT from now on; the handlers installed before still run (vLLM's
        event loop installs its own when the server starts, so call this after that)."""
        for stop in STOP_SIGNALS:
            signal.signal(stop, self._noting(signal.getsignal(stop)))

    def _noting(self, previous: Handler) -> Callable[[int, FrameType | None], None]:
        def note(signum: int, frame: FrameType | None) -> None:
            self.requested = True
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)

        return note

    def exit_unless_requested(self, why: str) -> None:
        """Exit with status 1 now, unless a stop was asked for (then the stop goes on and its
        status stands)."""
        if self.requested:
            return
        logger.error(
            "%s; exiting with status %d (serve starts vLLM again, or the platform replaces the "
            "instance)",
            why,
            FAILED,
        )
        os._exit(FAILED)
