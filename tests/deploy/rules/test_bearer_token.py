"""The bearer token against tokens signed once, as the SageMaker SDK signs them
(tests/support/fixtures/bearer_token.json): the client's token function makes exactly them from
the same inputs and clock, and the runtime emulator accepts them and refuses near misses."""

import base64
import datetime
import json
from typing import Any

import botocore.auth
import pytest
from botocore.credentials import ReadOnlyCredentials

from tests.support import runtime_emulator as emulator
from tests.support.runtime_emulator import Runtime
from vllm_sagemaker.deploy.kit.plans.openai_path import token

CASES: list[dict[str, Any]] = json.loads(emulator.TOKEN_FIXTURE.read_text())["tokens"]


def signed_at(case: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.strptime(case["signed_at"], "%Y%m%dT%H%M%SZ")


def credentials(case: dict[str, Any]) -> ReadOnlyCredentials:
    return ReadOnlyCredentials(case["access_key"], case["secret_key"], case["session_token"])


def signed(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch, **changes: Any) -> str:
    """The client's token for `case` (with `changes` to its region or expiry), signed at the
    case's time: botocore's SigV4 reads the clock through `botocore.auth.get_current_datetime`."""
    at = signed_at(case)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *_, **__: at)
    given = {"region": case["region"], "expires_s": case["expires_s"], **changes}
    return token(credentials(case), given["region"], given["expires_s"])


def runtime(case: dict[str, Any]) -> Runtime:
    return Runtime({}, secrets={case["access_key"]: case["secret_key"]}, region=case["region"])


def problem(case: dict[str, Any], value: str, after_s: float = 60) -> tuple[int, str] | None:
    now = signed_at(case) + datetime.timedelta(seconds=after_s)
    return emulator.token_problem(f"Bearer {value}", runtime(case), now)


def with_flipped_signature(value: str) -> str:
    """`value` with one hex digit of its signature changed, still a well-formed token."""
    url = base64.b64decode(value.removeprefix("sagemaker-api-key-")).decode()
    head, _, rest = url.partition("X-Amz-Signature=")
    flipped = "0" if rest[0] != "0" else "1"
    url = head + "X-Amz-Signature=" + flipped + rest[1:]
    return "sagemaker-api-key-" + base64.b64encode(url.encode()).decode()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "session" if c["session_token"] else "keys")
def test_the_client_makes_the_fixture_token(
    case: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert signed(case, monkeypatch) == case["token"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "session" if c["session_token"] else "keys")
def test_the_emulator_accepts_the_fixture_token_while_it_is_valid(case: dict[str, Any]) -> None:
    assert problem(case, case["token"]) is None
    assert problem(case, case["token"], after_s=case["expires_s"]) is None
    assert problem(case, case["token"], after_s=case["expires_s"] + 1) == (
        403,
        "The bearer token has expired.",
    )
    wrong_secret = Runtime({}, secrets={case["access_key"]: "another"}, region=case["region"])
    now = signed_at(case) + datetime.timedelta(seconds=60)
    assert emulator.token_problem(f"Bearer {case['token']}", wrong_secret, now) is not None


@pytest.mark.parametrize("case", CASES, ids=lambda c: "session" if c["session_token"] else "keys")
def test_the_emulator_refuses_near_misses(
    case: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    invalid = (403, "The bearer token included in the request is invalid.")
    assert problem(case, with_flipped_signature(case["token"])) == invalid
    other_region = "us-west-2" if case["region"] != "us-west-2" else "us-east-1"
    assert problem(case, signed(case, monkeypatch, region=other_region)) == invalid
    assert problem(case, signed(case, monkeypatch, expires_s=12 * 3600 + 1)) == invalid
    assert problem(case, signed(case, monkeypatch, expires_s=12 * 3600)) is None
    assert problem(case, case["token"].removeprefix("sagemaker-api-key-")) == invalid
    missing = emulator.token_problem(None, runtime(case))
    assert missing is not None and missing[0] == 401
