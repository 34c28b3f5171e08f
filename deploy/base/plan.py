"""A command's plan as a value, and the one `apply` that runs every plan (Terraform's plan and
apply): a command reads AWS and checks what it read while it plans (`deploy.base.command`); the plan
holds the calls, the end states each wait must confirm, the scaling, what a failure takes back,
the notes and the assumptions; `apply` says the notes, then prints the plan for `--dry-run` or
makes it."""

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_sagemaker.deploy.base.calls import Call, Undo, to_json
from vllm_sagemaker.deploy.base.errors import ClientError, line_of
from vllm_sagemaker.deploy.base.run import (
    Rollback,
    call_failed,
    execute,
    not_waited,
    wait_for,
)
from vllm_sagemaker.deploy.base.say import say

# Makes calls and returns their answers: what a step's own `make` is handed.
Make = Callable[[list[Call]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Wait:
    """An end state a run waits for: `describe` read until its `status` is one of `done`; one
    of `failed` fails the run (taken back, when `taken_back`)."""

    describe: Call
    status: str
    done: frozenset[str] = frozenset({"InService"})
    failed: frozenset[str] = frozenset({"Failed"})
    taken_back: bool = True


@dataclass(frozen=True)
class Step:
    """Calls made in order, then the end state they must reach before the next step (none:
    the next step follows at once). `make`: how the calls are made, when not one after another
    (scaling's alarm takes the ARN its policy's answer gives), or when the step's work is more
    than AWS calls (a build, a job run here); it may give the run's exit status."""

    calls: tuple[Call, ...]
    wait: Wait | None = None
    make: Callable[[Sequence[Call], Make], int | None] | None = None


@dataclass(frozen=True)
class OneByOne:
    """Calls made each on its own and said as made (`named`: what one touched), as `deploy
    delete` removes: a refused one is said and the rest go on, except the operations in
    `stands`, whose refusal stops the run with their line beside it."""

    named: Callable[[Call], str]
    stands: Mapping[str, str]


@dataclass(frozen=True)
class Plan:
    """What one run does. `undo`: how a failure takes a made call back (`Rollback`), and with
    `keep_on_failure`, what it names instead (None: a failure is said as it is, nothing taken
    back); `no_wait`: the last wait is said, not waited;
    `one_by_one`: each call on its own (`OneByOne`); `report`: what a real run says once its
    end state is confirmed, from the calls' answers. A dry run prints the calls, or `preview`
    when the run's work is not AWS calls (a token, a request, a fleet's shards), then says
    `then`: what the run does beyond them (the builder's commands)."""

    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    undo: Callable[[Call], Undo | None] | None = None
    keep_on_failure: bool = False
    no_wait: bool = False
    one_by_one: "OneByOne | None" = None
    report: Callable[[list[dict[str, Any]]], None] | None = None
    preview: str | None = None
    then: tuple[str, ...] = ()
    calls: tuple[Call, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "calls", tuple(c for step in self.steps for c in step.calls))


def apply(plan: Plan, dry_run: bool) -> int:
    """Say the plan's notes; then print it (with what it assumed) for a dry run, or make it:
    each step's calls, then its wait; a failure takes back what the run made (`Rollback`)."""
    for note in plan.notes:
        say(note)
    if dry_run:
        for assumption in plan.assumed:
            say(f"dry run: {assumption}")
        print(to_json(plan.calls) if plan.preview is None else plan.preview)
        for line in plan.then:
            say(line)
        return 0
    if plan.one_by_one is not None:
        return _one_by_one(plan.calls, plan.one_by_one)
    answers: list[dict[str, Any]] = []
    status = 0
    last = next((step.wait for step in reversed(plan.steps) if step.wait), None)
    rollback = None if plan.undo is None else Rollback(plan.undo, plan.keep_on_failure)
    with rollback or contextlib.nullcontext():

        def make(calls: list[Call]) -> list[dict[str, Any]]:
            return execute(calls, rollback)

        for step in plan.steps:
            if step.make is not None:
                status = step.make(step.calls, make) or status
            else:
                answers += make(list(step.calls))
            if step.wait is not None and step.wait.taken_back:
                _wait(step.wait, plan.no_wait and step.wait is last)
    if last is not None and not last.taken_back:
        _wait(last, plan.no_wait)
    if plan.report is not None and not plan.no_wait:
        plan.report(answers)
    return status


def _wait(wait: Wait, said_only: bool) -> None:
    if said_only:
        not_waited(wait.describe)
    else:
        wait_for(wait.describe, wait.status, set(wait.done), set(wait.failed))


def _one_by_one(calls: Sequence[Call], how: OneByOne) -> int:
    import botocore.exceptions  # here, not at the top: `--help` loads the commands

    failed = 0
    for call in calls:
        try:
            execute([call])
        except botocore.exceptions.ClientError as error:
            line = call_failed(call, line_of(error) or str(error))
            if call.operation in how.stands:
                raise ClientError(f"{line}; {how.stands[call.operation]}") from error
            failed += 1
            say(line)
        else:
            say(f"removed {how.named(call)}")
    if failed:
        raise ClientError(
            f"{failed} of {len(calls)} deletions failed; run the same command again to retry"
        )
    return 0
