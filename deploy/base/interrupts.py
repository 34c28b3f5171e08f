"""Ctrl-C in the client's commands: the first stops the command in order (in asyncio, `run`
cancels the main task), which says in one line what it kept and how to go on (`Interrupted`),
printed by the top (`report`), exit status 130; a second ends the process at once."""

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

from vllm_sagemaker.deploy.base.errors import ExitStatus

T = TypeVar("T")

RESUME = "run the same command with --resume to finish"
AGAIN = "run the same command again"
# The commands that finish an interrupted run with --resume.
RESUMABLE = frozenset({"batch", "transform"})


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped the command; the message is its one line (what it kept, how to go on)."""


def interrupted_line(what: str, go_on: str) -> str:
    """The shape of every line a stop says: `stopped: <what is left>; <how to go on>`."""
    return f"stopped: {what}; {go_on}"


def kept_line(count: int, noun: str, verb: str, where: str, total: int | None = None) -> str:
    """The line of a run stopped with `count` (of `total`) `noun`s `verb` and kept in `where`."""
    if not count:
        none = f"none of {total} {noun}s" if total is not None else f"no {noun}"
        return interrupted_line(f"{none} {verb}, nothing written to {where}", AGAIN)
    done = f"{count} of {total} {noun}s" if total is not None else f"{count} {noun}"
    if total is None and count != 1:
        done += "s"
    return interrupted_line(f"{done} {verb} and kept in {where}", RESUME)


# A wait Ctrl-C stopped, by its Describe call: what goes on, the parameter naming it, and the
# commands that check it and take it back.
WAITS = {
    "DescribeEndpoint": (
        "endpoint",
        "EndpointName",
        "aws sagemaker describe-endpoint --endpoint-name {name}",
        "delete it with vllm-sagemaker deploy delete --name {name}",
    ),
    "DescribeInferenceComponent": (
        "inference component",
        "InferenceComponentName",
        "aws sagemaker describe-inference-component --inference-component-name {name}",
        "delete it with vllm-sagemaker deploy delete --name ENDPOINT --component {name}",
    ),
    "DescribeTransformJob": (
        "transform job",
        "TransformJobName",
        "aws sagemaker describe-transform-job --transform-job-name {name}",
        "stop it with aws sagemaker stop-transform-job --transform-job-name {name}",
    ),
}


def wait_line(
    operation: str,
    params: dict[str, Any],
    status: str | None,
    region: str | None,
    profile: str | None = None,
) -> str:
    """The line of a wait on `operation` (`params`, last seen `status`) Ctrl-C stopped."""
    kind, key, check, undo = WAITS[operation]
    name = params[key]
    seen = f" ({status})" if status else ""
    where = _where(region, profile)
    return interrupted_line(
        f"{kind} {name}{seen} goes on in SageMaker without this command",
        f"check it with {check.format(name=name)}{where}, or {undo.format(name=name)}{where}",
    )


def not_waited_line(
    operation: str, params: dict[str, Any], region: str | None, profile: str | None
) -> str:
    """What `--no-wait` says as it returns: what goes on, and the command that checks it (the
    one a Ctrl-C during the wait names)."""
    kind, key, check, _ = WAITS[operation]
    name = params[key]
    return (
        f"{kind} {name} goes on in SageMaker (--no-wait); "
        f"check it with {check.format(name=name)}{_where(region, profile)}"
    )


def _where(region: str | None, profile: str | None) -> str:
    return (f" --region {region}" if region else "") + (f" --profile {profile}" if profile else "")


def second_line(command: str) -> str:
    """What a second Ctrl-C says as it ends `command` at once."""
    hint = f"; {RESUME}" if command in RESUMABLE else ""
    return f"{command}: stopped at once by a second Ctrl-C{hint}"


def top_line(stop: KeyboardInterrupt) -> str:
    """The line for a Ctrl-C that reached the top: its own, or a plain one."""
    return str(stop) if isinstance(stop, Interrupted) and str(stop) else "stopped by Ctrl-C"


@dataclass
class _State:
    """The command being run, the Ctrl-Cs it got, and the asyncio task a Ctrl-C cancels."""

    command: str = ""
    count: int = 0
    task: "asyncio.Task[Any] | None" = None
    loop: asyncio.AbstractEventLoop | None = None


_state = _State()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _state.count += 1
    if _state.count > 1:
        os.write(2, (second_line(_state.command) + "\n").encode())
        os._exit(ExitStatus.INTERRUPTED)
    task, loop = _state.task, _state.loop
    if task is not None and loop is not None and not task.done():
        # As asyncio.Runner does: cancel the main task, and wake the loop if it waits.
        task.cancel()
        loop.call_soon_threadsafe(lambda: None)
        return
    raise KeyboardInterrupt


@contextlib.contextmanager
def handled(command: str) -> Iterator[None]:
    """Ctrl-C handled while `command` runs (main thread), and after, for a second Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    _state.command, _state.count = command, 0
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if not _state.count:
            signal.signal(signal.SIGINT, previous)


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` where Ctrl-C cancels `main` (its cleanup runs) and ends as a
    KeyboardInterrupt, or as the `Interrupted` that `main` raised to say what it kept."""

    async def watched() -> T | Interrupted:
        _state.task, _state.loop = asyncio.current_task(), asyncio.get_running_loop()
        try:
            try:
                result = await main
            except Interrupted as stop:
                # Raised outside the loop: a KeyboardInterrupt in a task stops the loop itself.
                return stop
            # A Ctrl-C during `main`'s last step (no await left to land on: an output's
            # delivery) came after its work was done: it lands here, and the result stands.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
            return result
        finally:
            _state.task = _state.loop = None

    try:
        result = asyncio.run(watched())
    except asyncio.CancelledError:
        if _state.count:
            raise KeyboardInterrupt from None
        raise
    if isinstance(result, Interrupted):
        raise result
    return result


def report(command: str, stop: KeyboardInterrupt) -> int:
    """Print a Ctrl-C's line and return the exit status; waiting threads do not hold the exit."""
    print(f"{command}: {top_line(stop)}", file=sys.stderr, flush=True)
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        os._exit(ExitStatus.INTERRUPTED)
    return ExitStatus.INTERRUPTED
