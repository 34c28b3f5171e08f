"""`serve` keeps vLLM up: it runs vLLM's server as a child and starts it again when it fails.

vLLM runs in a process group of its own; `serve` stays the container's PID 1 and the parent
(subreaper) of everything vLLM starts. When vLLM's server exits with a failure (its engine died:
`handler.process.lifecycle` makes that status 1; or it was killed), `serve` kills the whole group
and
waits until no process of it is left, the engine core included (an engine core left behind
would hold the GPU's memory and fail the next start: vLLM issue #55510), then starts vLLM again
with the same command, as long as `container.restarts` allows. A clean exit ends `serve` with it,
and so does a usage error (vLLM refused its arguments: they would be refused again).

SIGTERM and SIGINT go on to vLLM's server, which stops on its own (a running batch pauses); after
the policy's stop timeout whatever is left of the group is killed. Signals are taken
synchronously (blocked, then waited for), so no handler can race the loop.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from vllm_sagemaker.container import cgroup, restarts
from vllm_sagemaker.core import prctl
from vllm_sagemaker.core.env import RESTARTS_VAR
from vllm_sagemaker.core.restart_policy import RestartPolicy

STOPS = frozenset({signal.SIGTERM, signal.SIGINT})
WATCHED = STOPS | {signal.SIGCHLD}
# How often a group being ended is looked at again (its processes need not be our children,
# so their exits need not wake us).
GROUP_POLL_S = 0.05


def _log(message: str) -> None:
    print(f"serve: {message}", file=sys.stderr, flush=True)


def _group_alive(pgid: int) -> bool:
    """Some process of the group is left (a zombie not yet reaped counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Supervisor:
    """Runs one command as vLLM's server, again after each failure the policy allows."""

    def __init__(
        self, command: Sequence[str], env: Mapping[str, str], policy: RestartPolicy
    ) -> None:
        self.command, self.env, self.policy = list(command), dict(env), policy
        self.restarts: list[float] = []
        # Set by the first SIGTERM or SIGINT: from then on nothing starts again.
        self.stop_deadline: float | None = None

    def run(self) -> int:
        """Supervise until vLLM stops cleanly or on request, or fails past the policy; the
        status `serve` exits with."""
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
        prctl.adopt_orphans()
        while True:
            kills = cgroup.read().oom_kills
            server = self._start()
            returncode = self._wait(server.pid)
            # Reaped here (with every orphan), so Popen must never wait for it itself.
            server.returncode = returncode
            self._end_group(server.pid)
            limits = cgroup.read()
            killed = restarts.out_of_memory(kills, limits.oom_kills, limits.memory_bytes)
            if killed:
                _log(killed)
            if self.stop_deadline is not None or returncode == 0:
                return restarts.exit_status(returncode)
            if returncode == restarts.USAGE_ERROR:
                _log(restarts.USAGE_ERROR_MESSAGE)
                return restarts.USAGE_ERROR
            now = time.monotonic()
            cause = f"vLLM {restarts.describe(returncode)}"
            if not restarts.may_restart(self.policy, self.restarts, now):
                _log(
                    f"{cause}; the {self.policy.max_restarts} restarts PROCESS_MAX_START_RETRIES "
                    f"allows within {self.policy.window_s:g} s (SAGEMAKER_RESTART_WINDOW_SECONDS) "
                    f"are used up: exiting with status {restarts.GAVE_UP} so the platform "
                    "replaces the instance"
                )
                return restarts.GAVE_UP
            self.restarts.append(now)
            _log(
                f"{cause}; its processes are gone; starting it again (restart "
                f"{len(self.restarts)}, at most {self.policy.max_restarts} within "
                f"{self.policy.window_s:g} s)"
            )

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**self.env, RESTARTS_VAR: str(len(self.restarts))}
        parent = os.getpid()

        def in_child() -> None:
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            # If `serve` is killed outright (outside a container, where PID 1 dying ends
            # everything), vLLM's server is asked to stop rather than left running.
            prctl.die_with_parent(parent)

        return subprocess.Popen(self.command, env=env, process_group=0, preexec_fn=in_child)

    def _wait(self, server: int) -> int:
        """Until vLLM's server exits: its returncode (negative: the signal that killed it).
        Stop signals go on to it, and past the stop deadline the group is killed."""
        killed = False
        while True:
            info: signal.struct_siginfo | None
            if self.stop_deadline is None or killed:
                info = signal.sigwaitinfo(WATCHED)
            else:
                info = signal.sigtimedwait(WATCHED, max(0.0, self.stop_deadline - time.monotonic()))
            if info is None:
                _log(
                    f"vLLM did not stop within {self.policy.stop_timeout_s:g} s "
                    "(SAGEMAKER_STOP_TIMEOUT_SECONDS); killing it"
                )
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server, signal.SIGKILL)
                killed = True
            elif info.si_signo in STOPS:
                self._stop_requested(info.si_signo)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(server, info.si_signo)
            else:
                for pid, returncode in _reap():
                    if pid == server:
                        return returncode

    def _stop_requested(self, signum: int) -> None:
        if self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + self.policy.stop_timeout_s
            _log(f"{signal.Signals(signum).name}: stopping vLLM")

    def _end_group(self, pgid: int) -> None:
        """Kill what is left of vLLM's process group and wait until none of it is left (a stop
        requested meanwhile waits no longer than its deadline)."""
        while _group_alive(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            info = signal.sigtimedwait(WATCHED, GROUP_POLL_S)
            if info is not None and info.si_signo in STOPS:
                self._stop_requested(info.si_signo)
            _reap()
            if self.stop_deadline is not None and time.monotonic() > self.stop_deadline:
                _log("processes of vLLM outlived the stop timeout; exiting without them")
                return


def _reap() -> list[tuple[int, int]]:
    """Every child that has exited (vLLM's server, and what it left behind), with its
    returncode."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, os.waitstatus_to_exitcode(status)))
