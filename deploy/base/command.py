"""A client command as data, as the AWS CLI v2 declares its commands: its help, its options, the
checks of its options before any AWS call (`CHECKS`) and its `plan`, which reads AWS and makes
every check of what it read. `run` runs one: its checks (`checked`), its plan (`planned`), and
`deploy.base.plan.apply`, which makes the plan (or prints it, for a dry run).

A `Check` is the options it reads (argparse's dests; `environ`; `environment`, the --env as
variables) and a pure rule giving the line that says what is wrong. The first problem is refused
(exit 2); a warning (an instance family the kit does not know) is said and the command goes on."""

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from vllm_sagemaker.deploy.base.errors import ClientError, stop_at
from vllm_sagemaker.deploy.base.plan import Plan, apply
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.say import say


@dataclass(frozen=True)
class Check:
    reads: str
    rule: Callable[..., str | None]
    warns: bool = False
    # An option that must be given for the check to apply (--serverless), one that skips it
    # (--local: no SageMaker).
    when: str = ""
    unless: str = ""

    def __call__(self, values: Mapping[str, Any]) -> str | None:
        if (self.when and values.get(self.when) is None) or values.get(self.unless):
            return None
        return self.rule(*(values.get(name) for name in self.reads.split()))


def given(rule: Callable[..., str | None]) -> Callable[..., str | None]:
    """`rule` for an option that may be left out: no problem when it is."""

    def checked(value: Any, *more: Any) -> str | None:
        return None if value is None else rule(value, *more)

    return checked


def env_from_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """`--env KEY=VALUE ...` as variables."""
    return {key: value for key, _, value in (pair.partition("=") for pair in pairs)}


class Command(Protocol):
    """A client command: its help and options as data, its checks, and its plan. `plan` reads
    AWS through `reads` (a dry run reads too, and says what it had to assume) and makes every
    check of what it read; it writes nothing."""

    @property
    def SUMMARY(self) -> str: ...

    @property
    def DESCRIPTION(self) -> str: ...

    @property
    def CHECKS(self) -> Sequence[Check]: ...

    def add_options(self, parser: argparse.ArgumentParser) -> None: ...

    def plan(self, args: argparse.Namespace, reads: Reads) -> Plan: ...


def checked(
    table: Sequence[Check], args: argparse.Namespace, environ: Mapping[str, str]
) -> list[str]:
    """Refused at the table's first problem; else its warnings, in order."""
    values = vars(args)
    values = {**values, "environ": environ, "environment": env_from_pairs(values.get("env") or [])}
    warnings = []
    for each in table:
        found = each(values)
        if each.warns and found:
            warnings.append(found)
        else:
            stop_at(found)
    return warnings


def planned(command: Command, args: argparse.Namespace) -> Plan:
    """`command`'s plan for `args`, with the notes and assumptions its reads made; the notes said
    before a refusal are said with it."""
    reads = Reads(getattr(args, "dry_run", False))
    try:
        plan = command.plan(args, reads)
    except ClientError:
        for note in reads.notes:
            say(note)
        raise
    return replace(plan, notes=(*reads.notes, *plan.notes), assumed=(*reads.assumed, *plan.assumed))


def run(command: Command, args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Check the options (the first problem is refused; warnings are said), plan the command and
    apply its plan (print it, for a dry run): the run's exit status."""
    for warning in checked(command.CHECKS, args, environ):
        say(f"warning: {warning}")
    return apply(planned(command, args), getattr(args, "dry_run", False))
