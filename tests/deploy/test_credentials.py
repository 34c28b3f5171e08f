"""Credentials AWS cannot be asked with, and `--profile`, as a user meets them: the real
`vllm-sagemaker` command, a real AWS config file (a `credential_process` that prints expired
credentials, an SSO profile never logged in to, keys moto refuses), and every command that calls
AWS. Each says one line, what is wrong and what to run, with its documented exit status and no
traceback; a dry run plans on, saying what it assumed. And a proxy's page where AWS or a
container should answer: one line, its status; a missing endpoint: one wording for all."""

import contextlib
import http.server
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.deploy.batching import completion, jsonl, no_aws, read
from tests.deploy.deploying import ROLE, model_options
from tests.support import aws as aws_mock
from tests.support import cli, local_http, processes
from tests.support.servers import free_port

REGION = "us-east-1"
# Nothing listens here: a command that got past its credentials would say so.
NOBODY = "http://127.0.0.1:9"
NO_CREDENTIALS = (
    "no AWS credentials found: run `aws configure` (keys) or `aws configure sso`, or give "
    "--profile NAME (for an SSO profile, `aws sso login --profile NAME` first)"
)


def expired_process(directory: Path) -> str:
    """A credential_process that prints credentials which expired in 2020, as JSON."""
    script = directory / "expired-credentials"
    printed = {
        "Version": 1,
        "AccessKeyId": "AKIAEXPIREDEXAMPLE",
        "SecretAccessKey": "expired-secret",
        "SessionToken": "expired-token",
        "Expiration": "2020-01-01T00:00:00Z",
    }
    script.write_text(f"#!/bin/sh\necho '{json.dumps(printed)}'\n")
    script.chmod(0o755)
    return str(script)


def expired(process: str, profile: str = "default") -> str:
    return (
        f"the AWS credentials of profile {profile} have expired: renew what its "
        f"credential_process (`{process}`) prints (often a login to its tool)"
    )


@pytest.fixture
def config(tmp_path: Path) -> tuple[Path, str]:
    """An AWS config: `default` and `prod` get expired credentials from a credential_process,
    `corp` is an SSO profile nobody logged in to, `bad` holds keys AWS does not know, `work`
    holds moto's keys; the config's path and the process."""
    process = expired_process(tmp_path)
    path = tmp_path / "aws-config"
    path.write_text(
        f"[default]\ncredential_process = {process}\n\n"
        f"[profile prod]\ncredential_process = {process}\n\n"
        "[profile corp]\nsso_session = corp\nsso_account_id = 123456789012\n"
        "sso_role_name = Admin\n\n"
        "[sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\n"
        f"sso_region = {REGION}\n\n"
        "[profile bad]\naws_access_key_id = AKIAREFUSEDEXAMPLE\naws_secret_access_key = x\n\n"
        "[profile work]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    return path, process


def user_env(home: Path, config: Path | None, **extra: str) -> dict[str, str]:
    """No AWS setting but a region, nothing listening where AWS would be, and `config`."""
    return {
        **no_aws(home),
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL": NOBODY,
        "AWS_CONFIG_FILE": str(config) if config else os.devnull,
        **extra,
    }


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return processes.run([cli.VLLM_SAGEMAKER, *args], env=env, text=True)


def commands(tmp_path: Path) -> list[tuple[list[str], int, str]]:
    """Every command that calls AWS, with the exit status and the start of its line when the
    credentials cannot be used: (arguments, status, what the line says before why)."""
    endpoint = [*model_options("llm", "ml.g5.2xlarge"), "--role", ROLE]
    read = "deploy: cannot read DescribeEndpoint: "
    return [
        (["deploy", "token", "--name", "llm"], 1, read),
        (["deploy", "endpoint", *endpoint], 1, read),
        (["deploy", "delete", "--name", "llm"], 1, read),
        (["deploy", "invoke", "--name", "llm", "--body", "{}"], 1, "deploy: "),
        (
            transform_args(tmp_path),
            2,  # the job could not start, as for any input that cannot be listed
            "transform: cannot read s3://data/in/: ",
        ),
        (batch_args(tmp_path), 1, "batch: endpoint llm: "),
    ]


def transform_args(tmp_path: Path) -> list[str]:
    out = str(tmp_path / "out")
    return ["transform", *cli.options(endpoint=NOBODY, input="s3://data/in/", output=out)]


def batch_args(tmp_path: Path) -> list[str]:
    """`batch` on the SageMaker endpoint `llm`, from a file of one line."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    files = cli.options(input_file=str(tmp_path / "in.jsonl"), output_file=f"{tmp_path}/o.jsonl")
    return ["batch", *files, "--sagemaker-endpoint", "llm"]


def told(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command said (a deploy note before it, such as the instance
    type's, aside)."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if "note:" not in line]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("setup", ["expired", "none"])
def test_every_command_is_one_line_naming_what_to_run(
    tmp_path: Path, config: tuple[Path, str], setup: str
) -> None:
    """A credential_process that prints expired credentials (botocore's 70-line RuntimeError
    before), or no credentials at all."""
    path, process = config
    env = user_env(tmp_path, path if setup == "expired" else None)
    why = expired(process) if setup == "expired" else NO_CREDENTIALS
    for args, status, start in commands(tmp_path):
        done = run(env, *args)
        assert done.returncode == status, (args, done.stderr)
        assert told(done) == start + why, args
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["in.jsonl", "aws-config", "expired-credentials"]
    )


def test_a_dry_run_plans_on_and_says_what_it_assumed(
    tmp_path: Path, config: tuple[Path, str]
) -> None:
    path, process = config
    env = user_env(tmp_path, path)
    endpoint = [*model_options("llm", "ml.g5.2xlarge"), "--role", ROLE]
    planned = run(env, "deploy", "endpoint", *endpoint, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert [call["operation"] for call in json.loads(planned.stdout)] == [
        "CreateModel",
        "CreateEndpointConfig",
        "CreateEndpoint",
    ]
    assert f"deploy: dry run: cannot read DescribeEndpoint ({expired(process)}), so the plan " in (
        planned.stderr
    )
    token = run(env, "deploy", "token", "--name", "llm", "--dry-run")
    assert token.returncode == 0, token.stderr
    assert token.stdout.startswith("export OPENAI_BASE_URL=")
    assert token.stderr.splitlines() == [
        f"deploy: dry run: cannot read DescribeEndpoint ({expired(process)}), so the plan "
        "assumes endpoint llm exists",
        "deploy: dry run: the token is made from your credentials when it runs; nothing is written",
    ]


def test_the_profile_given_is_the_one_told(tmp_path: Path, config: tuple[Path, str]) -> None:
    """--profile and AWS_PROFILE name the profile, and what renews it; --profile wins over keys
    in the environment, as the AWS CLI's does."""
    path, process = config
    env = user_env(tmp_path, path)
    keys = {"AWS_ACCESS_KEY_ID": "AKIAENVEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x"}
    read = "deploy: cannot read DescribeEndpoint: "
    for extra, args in (
        ({}, ["--profile", "prod"]),
        (keys, ["--profile", "prod"]),
        ({"AWS_PROFILE": "prod"}, []),
    ):
        done = run({**env, **extra}, "deploy", "delete", "--name", "llm", *args)
        assert done.returncode == 1
        assert told(done) == read + expired(process, "prod")
    sso = run({**env, "AWS_PROFILE": "corp"}, "deploy", "delete", "--name", "llm")
    assert sso.returncode == 1
    assert told(sso) == (
        read + "the SSO session of profile corp has expired or was never started: run "
        "`aws sso login --profile corp`"
    )


@pytest.mark.parametrize("command", ["deploy", "batch", "transform"])
def test_an_unknown_profile_is_one_line_naming_it(
    tmp_path: Path, config: tuple[Path, str], command: str
) -> None:
    """`--profile prdo` is refused (exit status 2) before anything runs; AWS_PROFILE=prdo is
    the same line at the first AWS call."""
    path, _ = config
    env = user_env(tmp_path, path)
    args = {
        "deploy": ["deploy", "delete", "--name", "llm"],
        "batch": batch_args(tmp_path),
        "transform": transform_args(tmp_path),
    }[command]
    profiles = f"in {path} or {os.devnull} (prod?); they hold bad, corp, default, prod, work"
    given = run(env, *args, "--profile", "prdo")
    assert given.returncode == 2
    assert told(given) == f"{command}: --profile 'prdo': no such AWS profile {profiles}"
    named = run({**env, "AWS_PROFILE": "prdo"}, *args)
    assert named.returncode == (2 if command == "transform" else 1)
    assert told(named).endswith(f"AWS_PROFILE 'prdo': no such AWS profile {profiles}")


def test_profile_reaches_every_command(aws: dict[str, str], tmp_path: Path) -> None:
    """With no keys in the environment, `--profile work` (moto's keys) is what every command
    calls AWS with; without it, the same commands have no credentials."""
    config = tmp_path / "aws-config"
    config.write_text("[profile work]\naws_access_key_id = testing\naws_secret_access_key = x\n")
    env = {**user_env(tmp_path, config), "AWS_ENDPOINT_URL": aws["AWS_ENDPOINT_URL"]}
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="profile-data")
    s3.put_object(Bucket="profile-data", Key="in/a.jsonl", Body=jsonl([{"prompt": "a"}]))
    s3.put_object(Bucket="profile-data", Key="batch.jsonl", Body=jsonl([completion("a")]))
    endpoint = [*model_options("profile-llm", "ml.p3.2xlarge"), "--role", ROLE, "--no-wait"]
    nobody = f"http://127.0.0.1:{free_port()}"
    out, data = str(tmp_path / "out"), "s3://profile-data/"
    batch_out = ["-o", str(tmp_path / "out.jsonl")]
    with aws_mock.moto_endpoint("profile") as name:
        for args, status in (
            (["deploy", "endpoint", *endpoint], 0),
            (["deploy", "token", "--name", name], 0),
            (["deploy", "invoke", "--name", name, "--body", "{}"], 0),
            (["deploy", "delete", "--name", "profile-llm"], 0),
            # past the input, the one line is the container nobody runs
            (["transform", *cli.options(endpoint=nobody, input=f"{data}in/", output=out)], 2),
            (
                [
                    "batch",
                    *cli.options(input_file=f"{data}batch.jsonl", endpoint=nobody),
                    *batch_out,
                ],
                1,
            ),
        ):
            without = run(env, *args)
            assert "no AWS credentials found" in without.stderr, (args, without.stderr)
            done = run(env, *args, "--profile", "work")
            assert done.returncode == status, (args, done.stderr)
            assert "Traceback" not in done.stderr
            if status:
                assert "credentials" not in told(done), (args, done.stderr)
    assert s3.list_objects_v2(Bucket="profile-data")["KeyCount"] == 2


def test_batch_and_token_say_a_missing_endpoint_alike(aws: dict[str, str], tmp_path: Path) -> None:
    env = {**os.environ, **aws}
    token = run(env, "deploy", "token", "--name", "nope")
    batch = run(env, *batch_args(tmp_path)[:-1], "nope")
    assert (token.returncode, batch.returncode) == (1, 1)
    assert told(token) == f"deploy: endpoint nope does not exist in {REGION}"
    assert told(batch) == f"batch: endpoint nope does not exist in {REGION}"


@pytest.fixture(scope="module")
def strict_aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A moto server that checks credentials, as AWS does: every key is one it does not know
    but those of user `nobody`, whom no policy allows anything; its URL and nobody's keys."""
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as patch:  # moto reads it as it starts
            patch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "2")  # the two calls that make nobody
            log = tmp_path_factory.mktemp("strict-moto") / "moto.log"
            url = stack.enter_context(aws_mock.moto_server(log))
        iam = boto3.client(
            "iam",
            endpoint_url=url,
            region_name=REGION,
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        iam.create_user(UserName="nobody")
        key = iam.create_access_key(UserName="nobody")["AccessKey"]
        yield (
            url,
            {
                "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            },
        )


def test_keys_aws_refuses_are_one_line_naming_what_to_run(
    strict_aws: tuple[str, dict[str, str]], tmp_path: Path, config: tuple[Path, str]
) -> None:
    """Keys in the environment, or a profile's, that AWS does not know (InvalidClientTokenId,
    S3's InvalidAccessKeyId): the line names them and what to change; a dry run plans on."""
    path, _ = config
    env = {**user_env(tmp_path, path), "AWS_ENDPOINT_URL": strict_aws[0]}
    keys = {"AWS_ACCESS_KEY_ID": "AKIAREFUSEDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x"}
    in_env = (
        "the AWS credentials in AWS_ACCESS_KEY_ID are not valid ({code}): set working "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or unset them to "
        "use a profile"
    )
    deleted = run({**env, **keys}, "deploy", "delete", "--name", "llm")
    assert deleted.returncode == 1
    assert told(deleted) == "deploy: cannot read DescribeEndpoint: " + in_env.format(
        code="InvalidClientTokenId"
    )
    listed = run({**env, **keys}, *transform_args(tmp_path))
    assert listed.returncode == 2
    assert told(listed) == "transform: cannot read s3://data/in/: " + in_env.format(
        code="InvalidAccessKeyId"
    )
    profiled = run(env, "deploy", "delete", "--name", "llm", "--profile", "bad")
    assert profiled.returncode == 1
    assert told(profiled) == (
        "deploy: cannot read DescribeEndpoint: the AWS credentials of profile bad are not "
        "valid (InvalidClientTokenId): run `aws configure --profile bad` with working keys"
    )
    endpoint = [*model_options("llm", "ml.g5.2xlarge"), "--role", ROLE, "--dry-run"]
    planned = run({**env, **keys}, "deploy", "endpoint", *endpoint)
    assert planned.returncode == 0, planned.stderr
    assert "so the plan assumes endpoint llm does not exist" in planned.stderr


def test_access_denied_names_the_credentials_in_use(
    strict_aws: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    """Keys AWS knows but no policy allows: the line names where they came from, the
    environment's keys or the profile's."""
    url, keys = strict_aws
    config = tmp_path / "aws-config"
    config.write_text(
        f"[profile nobody]\naws_access_key_id = {keys['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {keys['AWS_SECRET_ACCESS_KEY']}\n"
    )
    env = {**user_env(tmp_path, config), "AWS_ENDPOINT_URL": url}
    why = (
        "(User: arn:aws:iam::123456789012:user/nobody is not authorized to perform: "
        "sagemaker:DescribeEndpoint): their policy must allow it"
    )
    for extra, args, whose in (
        (keys, [], "in AWS_ACCESS_KEY_ID"),
        ({}, ["--profile", "nobody"], "of profile nobody"),
    ):
        done = run({**env, **extra}, "deploy", "delete", "--name", "llm", *args)
        assert done.returncode == 1
        assert told(done) == (
            f"deploy: AWS refused DescribeEndpoint: access denied to the AWS credentials {whose} "
            + why
        )


def test_a_credential_process_that_does_not_exist_is_named(tmp_path: Path) -> None:
    command = f"{tmp_path}/no-such-tool --account 1"
    config = tmp_path / "aws-config"
    config.write_text(f"[profile tool]\ncredential_process = {command}\n")
    done = run(user_env(tmp_path, config), "deploy", "delete", "--name", "llm", "--profile", "tool")
    assert done.returncode == 1
    assert told(done) == (
        f"deploy: the credential_process command of profile tool was not found: `{command}`"
    )


# A proxy's error page, seven lines of HTML (printed whole before).
PAGE = (
    b"<html>\n<head><title>{status}</title></head>\n<body>\n<center><h1>{status}</h1></center>\n"
    b"<hr><center>nginx</center>\n</body>\n</html>\n"
)


def proxy(status: int) -> type[http.server.BaseHTTPRequestHandler]:
    """A proxy that answers every request with its error page (`/ping` aside: 200)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.answer()

        def do_POST(self) -> None:
            self.answer()

        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            ping = self.path == "/ping"
            page = b"" if ping else PAGE.replace(b"{status}", str(status).encode())
            self.send_response(200 if ping else status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

    return Handler


def test_a_page_in_place_of_an_answer_is_one_line(tmp_path: Path) -> None:
    """An HTML page where AWS or a container should answer: its status, never the page; and
    never "AWS refused" for a page that is not AWS's."""
    keys = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x"}
    not_aws = "not AWS's answer: check AWS_ENDPOINT_URL and any proxy on the way (HTTPS_PROXY)"
    for status, phrase in ((403, "Forbidden"), (501, "Not Implemented"), (502, "Bad Gateway")):
        with local_http.serving(proxy(status)) as url:
            env = {**user_env(tmp_path, None, **keys), "AWS_ENDPOINT_URL": url}
            deleted = run(env, "deploy", "delete", "--name", "llm")
            assert deleted.returncode == 1
            answered = f"was answered HTTP {status} {phrase}, {not_aws}"
            assert told(deleted) == f"deploy: DescribeEndpoint {answered}"
            invoked = run(
                env, "deploy", "invoke", "--name", "llm", "--openai", "--body", '{"messages": []}'
            )
            assert invoked.returncode == 1
            route = f"{url}/endpoints/llm/openai/v1/chat/completions"
            assert told(invoked) == f"deploy: {route} {answered}"
    with local_http.serving(proxy(403)) as forbidden, local_http.serving(proxy(502)) as bad:
        env = {**user_env(tmp_path, None, **keys), "AWS_ENDPOINT_URL": forbidden}
        (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
        files = cli.options(input_file=str(tmp_path / "in.jsonl"), max_retries="0")
        out = tmp_path / "out.jsonl"
        stopped = run(env, "batch", *files, "-o", str(out), "--endpoint", bad)
        assert stopped.returncode == 1
        assert told(stopped) == "batch: HTTP 502: Bad Gateway (after 0 retries)"
        refused = run(env, "batch", *files, "-o", str(out), "--endpoint", forbidden)
        assert refused.returncode == 0, refused.stderr
        (line,) = read(out.read_bytes())
        assert line["error"]["message"] == (
            "The model refused the request holding this line: HTTP 403: Forbidden"
        )
