"""When `serve` starts vLLM again after it died, as pure rules: whether one more restart is
allowed under the policy read from the environment (`core.restart_policy`), and how an
exit reads in the log and in `serve`'s own exit status. The processes themselves are
`container.supervisor`'s.

The variables are AWS's vLLM image's (MHCS's `standard-supervisor`), with the meaning its README
gives: `PROCESS_AUTO_RECOVERY` (default true) restarts vLLM when it fails, and
`PROCESS_MAX_START_RETRIES` (default 3, 0-100) restarts at most that many times, after which the
container exits with status 1. Where ours differs from what its supervisord does:

- a clean exit (status 0: a stop somebody asked for, see `handler.process.lifecycle`) is never
  restarted;
- nor is a usage error (status 2, USAGE_ERROR): `serve` says in one line that vLLM refused its
  arguments and exits 2, as `serve` does for a configuration error of its own. Status 2 is how
  Python's argparse stops on an argument it rejects, at the start, and the same arguments would
  be rejected on every restart. It cannot be a crash: an uncaught exception exits 1, a signal is
  not a status, and once the server runs `handler.process.lifecycle` exits 1 on any failure. So
  the rule
  needs no "before the server was healthy" (which `serve` does not watch): a 2 is a usage error
  whenever it comes;
- the restarts are counted within `SAGEMAKER_RESTART_WINDOW_SECONDS`, however long vLLM ran
  before it died (supervisord counts only deaths within 1 s of a start, so a server that dies
  every minute restarts forever);
- past the limit `serve` exits 1 (supervisord stays up with no server, and nothing replaces it);
- vLLM gets `SAGEMAKER_STOP_TIMEOUT_SECONDS` to stop after SIGTERM (about 5 s there).
"""

import signal
from collections.abc import Sequence

from vllm_sagemaker.core.restart_policy import RestartPolicy

# `serve`'s status when vLLM failed more often than the policy allows (AWS documents 1).
GAVE_UP = 1
# vLLM's status when it refused its arguments (argparse's), and then `serve`'s.
USAGE_ERROR = 2
USAGE_ERROR_MESSAGE = (
    f"vLLM exited with status {USAGE_ERROR}: it refused its arguments (its 'error:' line above "
    "names the one); a configuration error, so it is not started again: fix the SM_VLLM_* "
    "variable or the argument given to serve"
)


def may_restart(policy: RestartPolicy, restarts: Sequence[float], now: float) -> bool:
    """One more restart at `now` keeps within the policy, given the moments of the earlier ones
    (any monotonic clock)."""
    recent = [moment for moment in restarts if now - moment < policy.window_s]
    return policy.enabled and len(recent) < policy.max_restarts


def describe(returncode: int) -> str:
    """How a process ended, for the log: `returncode` as `subprocess` gives it (a negative
    number is the signal that killed it)."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was killed by {name}"


def out_of_memory(kills_before: int, kills_after: int, limit_bytes: int | None) -> str | None:
    """The line naming a kernel OOM kill inside the container while vLLM ran (the cgroup's
    `oom_kill` count rose from `kills_before` to `kills_after`), else None."""
    if kills_after <= kills_before:
        return None
    limit = f"its limit of {limit_bytes // 1024**2:,} MiB" if limit_bytes else "its memory"
    return (
        f"the kernel's OOM killer killed a process of vLLM ({kills_after - kills_before} "
        f"kill(s) in the container's cgroup): the model and its load do not fit in {limit}; "
        "give the container more memory (on Serverless Inference a larger MemorySizeInMB), or "
        "lower VLLM_CPU_KVCACHE_SPACE or SM_VLLM_MAX_NUM_SEQS"
    )


def exit_status(returncode: int) -> int:
    """`serve`'s own status for a vLLM that ended with `returncode`: the same status, or
    128 + the signal that killed it, as a shell reports it."""
    return returncode if returncode >= 0 else 128 - returncode
