"""What a `deploy` command reads from AWS to decide its plan, alike in the real run and the dry
run. A read tells "not there" (None) from "could not ask" (no credentials, region or network):
then a real run stops with one line, and a dry run stops too or plans on with an assumption."""

from collections.abc import Callable
from typing import Any, TypeVar

from vllm_sagemaker.deploy.base.calls import Call, client, operation
from vllm_sagemaker.deploy.base.error_answers import missing
from vllm_sagemaker.deploy.base.errors import ClientError, line_of

T = TypeVar("T")


class Reads:
    """The reads one command makes while it plans; `assumed` lists what a dry run had to assume
    instead, `notes` what the plan found to tell (said before the plan runs, or is refused)."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.assumed: list[str] = []
        self.notes: list[str] = []

    def note(self, line: str) -> None:
        self.notes.append(line)

    def describe(self, call: Call, assumption: str | None = None) -> dict[str, Any] | None:
        """The answer to a read call, or None when what it reads does not exist. `assumption`:
        what a dry run that cannot reach AWS assumes instead (then None); without one it stops."""

        def ask() -> dict[str, Any] | None:
            import botocore.exceptions

            try:
                answer: dict[str, Any] = operation(call.service, call.operation)(**call.params)
            except botocore.exceptions.ClientError as error:
                if missing(error):
                    return None
                raise
            return answer

        return self.guarded(ask, call.operation, assumption, None)

    def names(self, operation: str, items: str, key: str, **params: Any) -> list[str]:
        """Every `key` of every item of a SageMaker List call, page after page."""
        return [item[key] for item in self.items("sagemaker", operation, items, **params)]

    def items(
        self, service: str, operation: str, items: str, what: str = "", **params: Any
    ) -> list[Any]:
        """Every item of a List (or paged Describe) call, page after page; `what` names the read
        (default: the operation)."""

        def listed() -> list[Any]:
            from botocore import xform_name

            pages = client(service).get_paginator(xform_name(operation)).paginate(**params)
            return [item for page in pages for item in page.get(items, [])]

        return self.required(listed, what or operation)

    def required(self, read: Callable[[], T], what: str) -> T:
        """`read()`; ClientError naming the read when AWS cannot be asked."""
        try:
            return read()
        except Exception as error:
            raise ClientError(f"cannot read {what}: {_cannot_ask(error)}") from None

    def guarded(self, read: Callable[[], T], what: str, assumption: str | None, instead: T) -> T:
        """`read()`, or for a dry run that cannot ask AWS, `instead` (the `assumption` made is
        recorded); a real run, or a read with no assumption, stops as `required` does."""
        if not self.dry_run or assumption is None:
            return self.required(read, what)
        try:
            return read()
        except Exception as error:
            self.assumed.append(f"cannot read {what} ({_cannot_ask(error)}), so {assumption}")
            return instead


def _cannot_ask(error: Exception) -> str:
    """Why AWS could not be asked (no region or network, or credentials it cannot be asked
    with), also behind a storage line; `error` raised again when it is AWS's answer (a missing
    bucket, access denied) or means something else."""
    import botocore.exceptions

    from vllm_sagemaker.deploy.base import credentials

    unreachable = (  # AWS could not be asked at all (besides credentials it cannot be asked with)
        botocore.exceptions.NoRegionError,
        botocore.exceptions.EndpointConnectionError,
        botocore.exceptions.ConnectTimeoutError,
    )
    cause: BaseException | None = error
    while cause and not (isinstance(cause, unreachable) or credentials.cannot_ask(cause)):
        cause = cause.__cause__
    if cause is None:
        raise error
    return line_of(error) or str(error)
