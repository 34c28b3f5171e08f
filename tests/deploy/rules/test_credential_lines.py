"""The lines for credentials AWS cannot be asked with, for a profile the AWS config does not
have, and for error answers that are pages rather than messages: one line each, what is wrong
and what to run."""

from typing import Any

import botocore.exceptions
import botocore.session
import botocore.stub
import pytest
from botocore.parsers import ResponseParserError

from vllm_sagemaker.deploy.base import credentials, error_answers
from vllm_sagemaker.deploy.base.credentials import Source
from vllm_sagemaker.deploy.base.error_answers import aws_line
from vllm_sagemaker.deploy.base.profile import unknown_profile

PROFILES: dict[str, dict[str, str]] = {
    "default": {"region": "us-east-1"},
    "keys": {"aws_access_key_id": "AKIA", "aws_secret_access_key": "x"},
    "sso": {"sso_session": "corp", "sso_account_id": "1", "sso_role_name": "Admin"},
    "legacy-sso": {"sso_start_url": "https://corp.awsapps.com/start"},
    "process": {"credential_process": "aws-vault export --format=json work"},
    "script": {"credential_process": "./creds.sh --account 1"},
    "role": {"role_arn": "arn:aws:iam::1:role/r", "source_profile": "sso"},
    "machine": {"role_arn": "arn:aws:iam::1:role/r", "credential_source": "Ec2InstanceMetadata"},
    "loop": {"role_arn": "arn:aws:iam::1:role/r", "source_profile": "loop"},
}
PAGE = (
    "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway"
    "</h1></center>\n<hr><center>nginx</center>\n</body>\n</html>\n"
)


def refused(
    code: str, status: int = 400, message: str = "refused", headers: dict[str, str] | None = None
) -> Exception:
    """The ClientError botocore raises for an error answer (through its stubber), with the
    answer's headers (AWS's carry `x-amz-request-id`)."""
    client = botocore.session.get_session().create_client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    with botocore.stub.Stubber(client) as stub:
        stub.add_client_error(
            "describe_endpoint",
            service_error_code=code,
            service_message=message,
            http_status_code=status,
            response_meta={"HTTPHeaders": headers or {}},
        )
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            client.describe_endpoint(EndpointName="llm")
    return raised.value


@pytest.mark.parametrize(
    ("source", "remedy"),
    [
        (Source("sso", PROFILES), "run `aws sso login --profile sso`"),
        (Source("legacy-sso", PROFILES), "run `aws sso login --profile legacy-sso`"),
        (Source("role", PROFILES), "run `aws sso login --profile sso`"),
        (Source("keys", PROFILES), "run `aws configure --profile keys` with working keys"),
        (
            Source("process", PROFILES),
            "renew what its credential_process (`aws-vault export --format=json work`) prints "
            "(often a login to its tool)",
        ),
        (
            Source("machine", PROFILES),
            "renew the credentials of its credential_source (Ec2InstanceMetadata)",
        ),
        (Source("default", PROFILES), "run `aws configure` (keys) or `aws configure sso`"),
        (
            Source("nowhere", {}),
            "run `aws configure` (keys) or `aws configure sso`, or give --profile NAME (for an "
            "SSO profile, `aws sso login --profile NAME` first)",
        ),
        (
            Source("sso", PROFILES, env_keys=True),
            "set working AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), "
            "or unset them to use a profile",
        ),
    ],
)
def test_what_renews_credentials_where_they_come_from(source: Source, remedy: str) -> None:
    assert credentials.remedy(source) == remedy


def test_a_role_that_is_its_own_source_ends() -> None:
    assert credentials.remedy(Source("loop", PROFILES)).startswith("run `aws configure")


@pytest.mark.parametrize(
    ("error", "source", "line"),
    [
        (
            RuntimeError(
                "Credentials were refreshed, but the refreshed credentials are still expired."
            ),
            Source("process", PROFILES),
            "the AWS credentials of profile process have expired: renew what its "
            "credential_process (`aws-vault export --format=json work`) prints (often a login "
            "to its tool)",
        ),
        (
            refused("ExpiredTokenException"),
            Source("keys", PROFILES),
            "the AWS credentials of profile keys have expired (ExpiredTokenException): run "
            "`aws configure --profile keys` with working keys",
        ),
        (
            refused("UnrecognizedClientException"),
            Source("default", PROFILES, env_keys=True),
            "the AWS credentials in AWS_ACCESS_KEY_ID are not valid "
            "(UnrecognizedClientException): set working AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or unset them to use a profile",
        ),
        (
            # an XML error to a JSON API (moto's refusal): botocore's code is the bare status
            refused(
                "403",
                403,
                "<ErrorResponse><Errors><Error><Code>InvalidClientTokenId</Code><Message>The "
                "security token included in the request is invalid.</Message></Error></Errors>"
                "</ErrorResponse>",
            ),
            Source("keys", PROFILES),
            "the AWS credentials of profile keys are not valid (InvalidClientTokenId): run "
            "`aws configure --profile keys` with working keys",
        ),
        (
            botocore.exceptions.UnauthorizedSSOTokenError(),
            Source("sso", PROFILES),
            "the SSO session of profile sso has expired or was never started: run "
            "`aws sso login --profile sso`",
        ),
        (
            botocore.exceptions.SSOTokenLoadError(error_msg="Token for corp does not exist"),
            Source("role", PROFILES),
            "the SSO session of profile role has expired or was never started: run "
            "`aws sso login --profile sso`",
        ),
        (
            botocore.exceptions.NoCredentialsError(),
            Source("default", PROFILES),
            "no AWS credentials found in profile default: run `aws configure` (keys) or "
            "`aws configure sso`",
        ),
        (
            botocore.exceptions.CredentialRetrievalError(
                provider="custom-process", error_msg="login required\n  run: vault login\n"
            ),
            Source("process", PROFILES),
            "cannot get AWS credentials (Error when retrieving credentials from custom-process: "
            "login required run: vault login): renew what its credential_process "
            "(`aws-vault export --format=json work`) prints (often a login to its tool)",
        ),
        (
            refused("AccessDeniedException", 400, "User: arn:aws:iam::1:user/u is not authorized"),
            Source("default", PROFILES, env_keys=True),
            "AWS refused DescribeEndpoint: access denied to the AWS credentials in "
            "AWS_ACCESS_KEY_ID (User: arn:aws:iam::1:user/u is not authorized): their policy must "
            "allow it",
        ),
        (
            # S3's HEAD: a bare 403, AWS's for its headers
            refused("403", 403, "", {"x-amz-request-id": "1"}),
            Source("keys", PROFILES),
            "AWS refused DescribeEndpoint: access denied to the AWS credentials of profile keys "
            "(403): their policy must allow it",
        ),
        (refused("403", 403, "Forbidden"), Source("keys", PROFILES), None),  # a proxy's 403
        (
            FileNotFoundError(2, "No such file or directory", "./creds.sh"),
            Source("script", PROFILES),
            "the credential_process command of profile script was not found: "
            "`./creds.sh --account 1`",
        ),
        (
            PermissionError(13, "Permission denied", "./creds.sh"),
            Source("script", PROFILES),
            "the credential_process command of profile script cannot run (Permission denied): "
            "`./creds.sh --account 1`",
        ),
        (FileNotFoundError(2, "No such file", "./creds.sh"), Source("keys", PROFILES), None),
        (FileNotFoundError(2, "No such file", "in.jsonl"), Source("script", PROFILES), None),
        (RuntimeError("a bug"), Source(), None),
        (refused("ValidationException"), Source(), None),
        (botocore.exceptions.ProfileNotFound(profile="x"), Source(), None),  # `explain`'s
    ],
)
def test_the_line_for_credentials_aws_cannot_be_asked_with(
    error: Exception, source: Source, line: str | None
) -> None:
    assert credentials.line(error, source) == line


def test_what_a_dry_run_may_plan_around() -> None:
    assert credentials.cannot_ask(botocore.exceptions.NoCredentialsError())
    assert credentials.cannot_ask(refused("ExpiredToken"))
    assert credentials.cannot_ask(refused("InvalidClientTokenId"))
    assert not credentials.cannot_ask(botocore.exceptions.ProfileNotFound(profile="x"))
    assert not credentials.cannot_ask(refused("AccessDeniedException"))
    assert not credentials.cannot_ask(FileNotFoundError(2, "No such file", "./creds.sh"))
    assert not credentials.cannot_ask(RuntimeError("a bug"))


@pytest.mark.parametrize(
    ("where", "name", "known", "line"),
    [
        (
            "--profile 'prdo'",
            "prdo",
            ["prod", "default"],
            "--profile 'prdo': no such AWS profile in ~/.aws/config (prod?); they hold "
            "default, prod",
        ),
        (
            "AWS_PROFILE 'x'",
            "x",
            [f"p{i:02}" for i in range(12)],
            "AWS_PROFILE 'x': no such AWS profile in ~/.aws/config; they hold p00, p01, p02, "
            "p03, p04, p05, p06, p07, p08, p09, ...",
        ),
        (
            "--profile 'prod'",
            "prod",
            [],
            "--profile 'prod': no such AWS profile in ~/.aws/config, which hold none: "
            "`aws configure --profile prod` (or `aws configure sso`) makes one",
        ),
    ],
)
def test_an_unknown_profile_is_named(where: str, name: str, known: list[str], line: str) -> None:
    assert unknown_profile(where, name, known, "~/.aws/config") == line


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        (PAGE, 502, "HTTP 502: Bad Gateway"),
        ("", 429, "HTTP 429: Too Many Requests"),
        (
            b'{"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}',
            400,
            "HTTP 400: max_tokens is too large",
        ),
        ('{"message": "Rate exceeded"}', 429, "HTTP 429: Rate exceeded"),
        ('{"detail": "Not Found"}', 404, "HTTP 404: Not Found"),
        ('{"detail": [{"loc": ["body"]}]}', 422, "HTTP 422: Unprocessable Entity"),
        (
            "<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>Please reduce your\n"
            "request rate.</Message></Error>",
            503,
            "HTTP 503: Please reduce your request rate.",
        ),
        (
            "upstream connect error\nor disconnect\n",
            503,
            "HTTP 503: upstream connect error or disconnect",
        ),
        ("x" * 1000, 500, "HTTP 500: " + "x" * 299 + "…"),
    ],
)
def test_an_error_answer_is_its_message_else_its_status(
    body: str | bytes, status: int, said: str
) -> None:
    assert error_answers.said(body, status) == said


def test_an_aws_answer_that_is_a_page_is_told_by_its_status() -> None:
    """A proxy's HTML page (seven lines, printed whole before), to a JSON API or a query one."""
    page = refused("403", 403, PAGE)
    assert aws_line(page) == (
        "DescribeEndpoint was answered HTTP 403 Forbidden, not AWS's answer: check "
        "AWS_ENDPOINT_URL and any proxy on the way (HTTPS_PROXY)"
    )
    unparsed: Any = ResponseParserError(
        f"Unable to parse response (mismatched tag), invalid XML "
        f"received. Further retries may succeed:\n{PAGE!r}"
    )
    assert aws_line(unparsed) == (
        "an answer that does not parse, not AWS's answer: check AWS_ENDPOINT_URL and any proxy "
        "on the way (HTTPS_PROXY)"
    )
    assert aws_line(refused("ValidationException", 400, "Could not find\nendpoint")) == (
        "AWS refused DescribeEndpoint: ValidationException: Could not find endpoint"
    )
