"""What the stand-in's two services share: AWS's error answer (`Refused`, 400 with its code and
message; `invalid` for a ValidationException), SageMaker's ARNs, a resource held as its Describe
answers it and the states it walks, `State` (what the emulator holds, every call it received and
the errors the next calls get), and `Calls`, the base of a service's handlers.

States: a component or endpoint is `Creating` (a component's update: `Updating`) at the first
Describe after the call and `InService` from the next on; a deleted component is `Deleting` at
the next Describe and gone after it.

ARNs carry the region of the request's signature and moto's account; what the emulator holds
is not kept apart by region.
"""

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.aws import REGION

ACCOUNT = "123456789012"  # moto's account
# Where a status goes once a Describe has answered it (None: the resource is gone).
SETTLES: dict[str, str | None] = {
    "Creating": "InService",
    "Updating": "InService",
    "Deleting": None,
}

Answer = dict[str, Any]
Forward = Callable[[], httpx.Response]


class Refused(Exception):
    """An AWS error answer: 400 with its code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> Refused:
    return Refused("ValidationException", message)


def arn(region: str, kind: str, name: str) -> str:
    """A SageMaker ARN, its name in lower case as SageMaker writes it."""
    return f"arn:aws:sagemaker:{region}:{ACCOUNT}:{kind}/{name.lower()}"


@dataclass
class Held:
    """A resource as its Describe answers it; `shown`: its present status was answered once."""

    fields: dict[str, Any]
    status_key: str = ""
    shown: bool = False
    tags: list[dict[str, str]] = field(default_factory=list)

    def moved(self, status: str) -> None:
        self.fields[self.status_key] = status
        self.fields["LastModifiedTime"] = time.time()
        self.shown = False

    def described(self) -> bool:
        """Advance a status already answered once (Creating -> InService); False: it is gone."""
        status = self.fields.get(self.status_key, "")
        if status in SETTLES and self.shown:
            settled = SETTLES[status]
            if settled is None:
                return False
            self.moved(settled)
        self.shown = True
        return True


@dataclass
class State:
    """What the emulator holds, by name (targets by ResourceId, policies by ResourceId and
    PolicyName), every call it received, and the errors the next calls get."""

    configs: dict[str, Held] = field(default_factory=dict)
    endpoints: dict[str, Held] = field(default_factory=dict)
    components: dict[str, Held] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    failures: dict[str, Refused] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def fail_next(self, operation: str, code: str, message: str = "failed by the test") -> None:
        """The next `operation` (of either service) is answered 400 `code` `message`."""
        with self.lock:
            self.failures[operation] = Refused(code, message)

    def operations(self) -> list[str]:
        with self.lock:
            return [operation for operation, _ in self.calls]

    def copies(self, component: str) -> int:
        """The component's DesiredCopyCount."""
        with self.lock:
            return int(self.components[component].fields["RuntimeConfig"]["DesiredCopyCount"])


class Calls:
    """One service's handlers: a method for each operation in OPERATIONS, named after it in
    snake case, taking the call's parameters and a way to forward the call to moto, answering
    the emulator's answer or None when moto's answer is the answer. `region` is the region of
    the call being answered."""

    OPERATIONS: frozenset[str] = frozenset()

    def __init__(self, state: State) -> None:
        self.state = state
        self.region = REGION

    def handle(self, operation: str, params: Answer, forward: Forward) -> Answer | None:
        """The handler's answer to the call, or None when the call is moto's to answer."""
        if operation not in self.OPERATIONS:
            return None
        handler: Callable[[Answer, Forward], Answer | None] = getattr(self, snake(operation))
        return handler(params, forward)


def snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def merged(forward: Forward, items: str, ours: list[Answer], params: Answer) -> Answer:
    """moto's answer to a List/Describe call with the emulator's items first (on its first page
    only); moto's refusal is raised as it is."""
    reply = forward()
    answer: Answer = reply.json() if reply.content else {}
    if reply.status_code != 200:
        raise Refused(str(answer.get("__type", "InternalFailure")), str(answer.get("message", "")))
    if "NextToken" not in params:
        answer[items] = ours + answer.get(items, [])
    return answer
