"""Every `vllm-sagemaker deploy ... --dry-run` in CASES prints exactly what it printed when it
was recorded: its exit status, its stdout and its stderr, byte for byte.

What it guards: the refactor of issue 66 (every deploy command builds a Plan value, and one apply
runs it) must keep each dry run byte-identical, plans, assumptions, notes and refusals alike.
Each case is one row of CASES (its name, the arguments after `deploy`, the environment it runs
in) and one file, dry_runs/<name>.txt. The environments:

- `no-aws`: NO_AWS, where boto3 cannot reach AWS, so the dry run says what it assumed;
- `moto`: the session's moto server holding what `moto_world` puts there (an endpoint on
  instances, a bucket with an input file, an ECR repository), so the dry run reads and plans an
  update, shards, an existing repository;
- `components`: conftest's inference-component stand-in in front of moto, holding the endpoint
  kept-host with the component kept-chat (`components_world`);
- `+TOOL`: the recording stand-in of that container builder, alone on PATH.

Nothing else of the test's environment reaches a case (every AWS_* variable and the few others
in LOOSE are removed). Only what varies from run to run is replaced before the comparison, by
`normalised`; the rest is compared as it is, and a difference fails with a unified diff of the
recorded file against this run.

To change a dry run on purpose, re-record every file, then review the diff of dry_runs/ in git
and commit it with the change that explains it:

    RECORD_DRY_RUNS=1 .venv/bin/pytest tests/deploy/test_dry_runs_kept.py
"""

import contextlib
import difflib
import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest

from tests.deploy.deploying import (
    CHECKOUT,
    IMAGE,
    NO_AWS,
    ROLE,
    deploy,
    fake_builders,
    put_image,
)
from tests.deploy.recording import run
from tests.support.aws import moto_endpoint
from vllm_sagemaker.deploy.base import run as base_run

KEPT = Path(__file__).with_name("dry_runs")
RECORDING = os.environ.get("RECORD_DRY_RUNS", "") not in ("", "0")
# Besides every AWS_* variable: what in the test's own environment would change a dry run.
LOOSE = ("SAGEMAKER_ROLE_ARN", "VLLM_API_KEY", "VLLM_SAGEMAKER_DEBUG", "COLUMNS", "LINES")
# The no-aws cases run this many at a time.
WORKERS = min(4, os.cpu_count() or 1)
ECR = IMAGE.removesuffix(":latest")
CPU = f"{ECR}:cpu"
WEST = IMAGE.replace("us-east-1", "us-west-2")
BUCKET = "kept-dry-runs"
BODY = '{"messages": [{"role": "user", "content": "hi"}]}'
# deploy batch's input, <tmp>/in.jsonl: two requests and a line that is none.
BATCH_LINES = [
    json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                "body": {"model": "m", "prompt": f"p{i}"}})
    for i in range(2)
] + ["not json"]  # fmt: skip


def model(name: str, instance: str, *extra: str, image: str = IMAGE) -> list[str]:
    return ["--name", name, "--image", image, "--model-id", "org/m", "--instance-type", instance,
            *extra]  # fmt: skip


def endpoint(name: str, *extra: str) -> list[str]:
    return ["endpoint", *model(name, "ml.g5.2xlarge", *extra)]


def component(host: str, name: str, *extra: str) -> list[str]:
    return ["component", "--endpoint", host, "--name", name, "--image", IMAGE,
            "--model-id", "org/m", *extra]  # fmt: skip


def transform(source: list[str], *extra: str) -> list[str]:
    return ["transform", "--name", "job", "--image", IMAGE, "--instance-type", "ml.g5.2xlarge",
            *source, "--input", "s3://data/in/", "--output", "s3://data/out/", *extra]  # fmt: skip


def batch(work: str, *extra: str) -> list[str]:
    return ["batch", *model("b", "ml.g5.2xlarge"), "-i", "<tmp>/in.jsonl",
            "-o", "<tmp>/out.jsonl", "--work-prefix", work, *extra]  # fmt: skip


def invoke(*extra: str) -> list[str]:
    return ["invoke", "--name", "llm", "--body", BODY, *extra]


G12 = ("--instance-type", "ml.g5.12xlarge")
ASYNC = ("--async-output", "s3://outputs/async/")
PREFIX = ["--model-prefix", "s3://models/llama/"]
SERVERLESS = ["endpoint", "--name", "sl", "--model-id", "org/m", "--serverless"]
LOCAL = ["--local", "http://127.0.0.1:1", "http://127.0.0.1:2"]
# (case, the arguments after `deploy`, its environment); in the arguments <tmp>, <checkout> and
# <endpoint> stand for what World.values holds.
# fmt: off
CASES: list[tuple[str, list[str], str]] = [
    ("endpoint-gpu", endpoint("llm", *G12, "--env", "SM_VLLM_MAX_MODEL_LEN=4096"), "no-aws"),
    ("endpoint-gpu-default-image", ["endpoint", "--name", "llm", "--model-id", "org/m", *G12],
     "no-aws"),
    ("endpoint-cpu-instance", ["endpoint", *model("cpu", "ml.m7i.8xlarge", image=CPU)], "no-aws"),
    ("endpoint-cpu-default-image", ["endpoint", "--name", "cpu", "--model-id", "org/m",
                                    "--instance-type", "ml.c7i.8xlarge"], "no-aws"),
    ("endpoint-model-data-two-instances", ["endpoint", "--name", "tar", "--image", IMAGE,
     "--model-data", "s3://models/m.tar.gz", "--instance-type", "ml.g5.2xlarge",
     "--instance-count", "2"], "no-aws"),
    ("endpoint-model-prefix", ["endpoint", "--name", "pre", "--image", IMAGE, *PREFIX,
                               "--instance-type", "ml.g5.2xlarge"], "no-aws"),
    ("endpoint-streamed-weights", ["endpoint", "--name", "pre", "--image", IMAGE, *PREFIX,
     "--stream-weights", "--instance-type", "ml.g5.2xlarge"], "no-aws"),
    ("endpoint-serverless", [*SERVERLESS, "2048"], "no-aws"),
    ("endpoint-serverless-provisioned",
     [*SERVERLESS, "4096:10", "--provisioned-concurrency", "2"], "no-aws"),
    ("endpoint-async", endpoint("jobs", *ASYNC), "no-aws"),
    ("endpoint-autoscale-concurrency", endpoint("as", "--autoscale", "1:4"), "no-aws"),
    ("endpoint-autoscale-concurrency-target",
     endpoint("as", "--autoscale", "2:8", "--scale-on", "concurrency", "--target", "16"),
     "no-aws"),
    ("endpoint-autoscale-waiting", endpoint("as", "--autoscale", "1:4", "--scale-on", "waiting"),
     "no-aws"),
    ("endpoint-async-autoscale-from-zero", endpoint("az", *ASYNC, "--autoscale", "0:2"),
     "no-aws"),
    ("endpoint-async-from-zero-target", endpoint("az", *ASYNC, "--autoscale", "0:3", "--target",
                                                 "2"), "no-aws"),
    ("endpoint-env-role-region", ["endpoint", *model("envs", "ml.g5.2xlarge", image=WEST),
     "--env", "SM_VLLM_MAX_MODEL_LEN=8k", "--env", "SAGEMAKER_METRICS=cloudwatch", "--role",
     ROLE, "--region", "us-west-2", "--no-wait", "--keep-on-failure"], "no-aws"),
    ("endpoint-unknown-family-warns", ["endpoint", *model("new", "ml.g9.mega")], "no-aws"),
    ("component-new-endpoint-gpus", component("shared", "chat", *G12, "--gpus", "2"), "no-aws"),
    ("component-cpu-copies", component("cpus", "small", "--instance-type", "ml.c7i.4xlarge",
     "--image", CPU, "--cpus", "4", "--memory", "8192", "--copies", "2"), "no-aws"),
    ("component-instances-timeouts", component("many", "chat", "--instance-type",
     "ml.g5.2xlarge", "--instances", "1:4", "--startup-timeout", "600",
     "--download-timeout", "900", "--no-wait"), "no-aws"),
    ("component-scale-to-zero", component("idle", "sleepy", "--instance-type", "ml.g5.2xlarge",
     "--scale-to-zero", "--copies", "0", "--max-copies", "2"), "no-aws"),
    ("component-scale-to-zero-target", component("idle", "sleepy", "--instance-type",
     "ml.g5.2xlarge", "--scale-to-zero", "--instances", "0:3", "--target", "10"), "no-aws"),
    ("transform-model-id", transform(["--model-id", "org/m"], "--instance-count", "3"),
     "no-aws"),
    ("transform-model-data-join", transform(["--model-data", "s3://models/m.tar.gz"],
     "--join-source", "Input", "--max-payload-mb", "6", "--max-concurrent-transforms", "4"),
     "no-aws"),
    ("transform-streamed-weights", transform([*PREFIX, "--stream-weights"]), "no-aws"),
    ("transform-cpu", ["transform", *model("cj", "ml.c5.4xlarge", image=CPU), "--input",
                       "s3://data/in/", "--output", "s3://data/out/"], "no-aws"),
    ("delete-cannot-read", ["delete", "--name", "llm"], "no-aws"),
    ("delete-component-cannot-read", ["delete", "--name", "llm", "--component", "c"], "no-aws"),
    ("dashboard", ["dashboard", "--name", "llm"], "no-aws"),
    ("batch-fleet-cannot-read", batch("s3://bucket/work/"), "no-aws"),
    ("batch-fleet-local", ["batch", "--name", "b", "-i", "<tmp>/in.jsonl", "-o",
                           "<tmp>/out.jsonl", "--work-prefix", "<tmp>/work", *LOCAL], "no-aws"),
    ("batch-cancel", ["batch", "--name", "b", "--work-prefix", "s3://bucket/w/", "--cancel"],
     "no-aws"),
    ("invoke", invoke(), "no-aws"),
    ("invoke-stream-component", invoke("--stream", "--component", "chat"), "no-aws"),
    ("invoke-async", invoke("--async"), "no-aws"),
    ("invoke-openai", invoke("--openai"), "no-aws"),
    ("token", ["token", "--name", "llm"], "no-aws"),
    ("token-component-json", ["token", "--name", "llm", "--component", "chat", "--json"],
     "no-aws"),
    ("image-buildah", ["image", "--context", "<checkout>"], "no-aws+buildah"),
    ("image-docker-cpu-tag", ["image", "--context", "<checkout>", "--target", "cpu", "--tag",
                              "v2", "--repository", "mine"], "no-aws+docker"),
    # Refused before any AWS call: exit status 2 and one line.
    ("refused-endpoint-name", endpoint("llama 3"), "no-aws"),
    ("refused-endpoint-env-case", endpoint("llm", "--env", "sm_vllm_max_model_len=8192"),
     "no-aws"),
    ("refused-endpoint-cpu-image-on-gpu", ["endpoint", *model("llm", "ml.g5.2xlarge",
                                                              image=CPU)], "no-aws"),
    ("refused-endpoint-realtime-from-zero", endpoint("rt", "--autoscale", "0:2"), "no-aws"),
    ("refused-endpoint-from-zero-scale-on",
     endpoint("az", *ASYNC, "--autoscale", "0:3", "--scale-on", "waiting"), "no-aws"),
    ("refused-endpoint-image-of-another-region", endpoint("llm", "--region", "us-west-2"),
     "no-aws"),
    ("refused-endpoint-provisioned-on-instances",
     endpoint("llm", "--provisioned-concurrency", "2"), "no-aws"),
    ("refused-endpoint-stream-weights-model-id", endpoint("llm", "--stream-weights"), "no-aws"),
    ("refused-component-no-copies", component("h", "c", "--instance-type", "ml.g5.2xlarge",
                                              "--copies", "0"), "no-aws"),
    ("refused-component-gpus", component("h", "c", *G12, "--gpus", "8"), "no-aws"),
    ("refused-transform-model-prefix", transform(PREFIX), "no-aws"),
    ("refused-batch-one-file", ["batch", "--name", "b", "--work-prefix", "s3://bucket/w/",
                                "-i", "in.jsonl"], "no-aws"),
    ("refused-batch-local-api-key-on-sagemaker",
     batch("s3://bucket/work/", "--api-key", "k"), "no-aws"),
    ("refused-invoke-body", ["invoke", "--name", "llm", "--body", "{not json"], "no-aws"),
    ("refused-invoke-stream-and-async", invoke("--stream", "--async"), "no-aws"),
    ("refused-token-expires", ["token", "--name", "llm", "--expires", "13h"], "no-aws"),
    ("refused-image-repository", ["image", "--context", "<checkout>", "--repository", "Bad"],
     "no-aws+buildah"),
    # Against moto: what the dry run reads decides the plan.
    ("moto-endpoint-update", endpoint("<endpoint>", "--autoscale", "1:2"), "moto"),
    ("moto-endpoint-to-serverless", [*SERVERLESS[:2], "<endpoint>", *SERVERLESS[3:], "2048",
                                     "--image", CPU], "moto"),
    ("moto-delete", ["delete", "--name", "<endpoint>"], "moto"),
    ("moto-dashboard", ["dashboard", "--name", "<endpoint>"], "moto"),
    ("moto-token", ["token", "--name", "<endpoint>"], "moto"),
    ("moto-transform-shards", ["transform", *model("kept-job", "ml.g5.2xlarge"),
     "--instance-count", "3", "--input", f"s3://{BUCKET}/in/", "--output",
     f"s3://{BUCKET}/out/"], "moto"),
    ("moto-batch-fleet", batch(f"s3://{BUCKET}/work/", "--instance-count", "2"), "moto"),
    ("moto-image-repository-exists", ["image", "--context", "<checkout>", "--repository",
     "kept-images", "--builder", "buildah"], "moto+buildah"),
    ("components-update", component("kept-host", "kept-chat", "--gpus", "2", "--copies", "2"),
     "components"),
    ("components-add-to-endpoint", component("kept-host", "kept-embed", "--copies", "2"),
     "components"),
    ("components-delete-endpoint", ["delete", "--name", "kept-host"], "components"),
    ("components-delete-one", ["delete", "--name", "kept-host", "--component", "kept-chat"],
     "components"),
]
# fmt: on


@dataclass
class World:
    """The environment a case runs in, and `values`: what each <name> in its arguments stands
    for there (and what `normalised` turns back into <name> in what it prints)."""

    env: dict[str, str]
    values: dict[str, str] = field(default_factory=dict)


def normalised(text: str, values: dict[str, str]) -> str:
    """`text` with what varies from run to run replaced by a placeholder, and nothing else:
    each of `values` (the temporary directory, the checkout, moto's and the stand-in's URLs,
    the moto endpoint's random suffix) by its <name>, longest first; the UTC time of an update's
    version (NAME-20250101-120000) by <UTC time>; a random uuid4 hex (the name of invoke
    --async's input object) by <uuid>."""
    for name, value in sorted(values.items(), key=lambda item: -len(item[1])):
        text = text.replace(value, f"<{name}>")
    text = re.sub(r"\b\d{8}-\d{6}\b", "<UTC time>", text)
    return re.sub(r"\b[0-9a-f]{32}\b", "<uuid>", text)


def rendered(argv: list[str], status: int, stdout: str, stderr: str) -> str:
    """A case's file: the command, its exit status, its stdout, its stderr (output that does not
    end with a newline is marked so, as diff marks it)."""

    def block(text: str) -> str:
        return text if text.endswith("\n") or not text else text + "\n\\ no newline at end\n"

    command = " ".join(json.dumps(arg) if " " in arg or not arg else arg for arg in argv)
    return (
        f"$ vllm-sagemaker deploy {command} --dry-run\nexit status: {status}\n"
        f"--- stdout\n{block(stdout)}--- stderr\n{block(stderr)}"
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<tmp>: the batch's input file, in.jsonl, and the builders' stand-ins."""
    directory = tmp_path_factory.mktemp("dry-runs")
    (directory / "in.jsonl").write_text("\n".join(BATCH_LINES) + "\n")
    return directory


@pytest.fixture(scope="module")
def moto_world(aws: dict[str, str]) -> Iterator[World]:
    """<endpoint> (on instances, a random name), the bucket BUCKET with in/requests.jsonl of 300
    lines, and the ECR repository kept-images holding the tag v1; all removed after."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    lines = [json.dumps({"custom_id": f"r{i}", "prompt": f"p{i}"}) for i in range(300)]
    s3.put_object(Bucket=BUCKET, Key="in/requests.jsonl", Body="\n".join(lines) + "\n")
    put_image("kept-images", "v1")
    with moto_endpoint("kept") as name:
        env = {**aws, "SAGEMAKER_ROLE_ARN": ROLE}
        yield World(env, {"endpoint": name, "aws": aws["AWS_ENDPOINT_URL"]})
    s3.delete_object(Bucket=BUCKET, Key="in/requests.jsonl")
    s3.delete_bucket(Bucket=BUCKET)
    boto3.client("ecr").delete_repository(repositoryName="kept-images", force=True)


@pytest.fixture
def components_world(
    components: object,
    aws: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[World]:
    """kept-host (ml.g5.12xlarge) with the component kept-chat, made by a real run in this
    process before the case and deleted after it."""
    monkeypatch.setattr(base_run, "POLL_S", 0.01)  # the stand-in's states move on at each read
    monkeypatch.setenv("SAGEMAKER_ROLE_ARN", ROLE)
    made = component("kept-host", "kept-chat", *G12, "--gpus", "2")
    status, _, err = run(capsys, "deploy", *made)
    assert status == 0, err
    urls = {key: os.environ[key] for key in os.environ if key.startswith("AWS_ENDPOINT_URL_")}
    yield World(
        {**aws, **urls, "SAGEMAKER_ROLE_ARN": ROLE},
        {"stand-in": os.environ["AWS_ENDPOINT_URL_SAGEMAKER"], "aws": aws["AWS_ENDPOINT_URL"]},
    )
    status, _, err = run(capsys, "deploy", "delete", "--name", "kept-host")
    assert status == 0, err


def world(kind: str, request: pytest.FixtureRequest, scratch: Path) -> World:
    """The environment `kind` names (see the module's docstring)."""
    base, _, builder = kind.partition("+")
    found = World(dict(NO_AWS)) if base == "no-aws" else request.getfixturevalue(f"{base}_world")
    env = dict(found.env)
    if builder:
        env.update(fake_builders(scratch / f"{kind}-builders", builder))
    return World(env, {"tmp": str(scratch), "checkout": CHECKOUT, **found.values})


@contextlib.contextmanager
def bare_environment() -> Iterator[None]:
    """This process's environment without what would reach a case unasked (`deploy` runs the
    command with it, plus the case's own)."""
    with pytest.MonkeyPatch.context() as bare:
        for key in list(os.environ):
            if key.startswith("AWS_") or key in LOOSE:
                bare.delenv(key)
        yield


def outcome(argv: list[str], here: World) -> str:
    """The case's dry run in `here`, as its file holds it."""
    args = list(argv)
    for placeholder, value in here.values.items():
        args = [arg.replace(f"<{placeholder}>", value) for arg in args]
    done = deploy(*args, "--dry-run", env=here.env)
    out, err = (normalised(text, here.values) for text in (done.stdout, done.stderr))
    return rendered(argv, done.returncode, out, err)


@pytest.fixture(scope="module")
def without_aws(request: pytest.FixtureRequest, scratch: Path) -> dict[str, str]:
    """The outcome of every case of this session that reads no AWS, by name: run all at once, in
    threads (they share nothing but the builders' stand-ins, written before any runs)."""
    chosen = {item.callspec.params["name"] for item in request.session.items
              if hasattr(item, "callspec") and "name" in item.callspec.params}  # fmt: skip
    cases = [(name, argv, world(kind, request, scratch)) for name, argv, kind in CASES
             if kind.startswith("no-aws") and name in chosen]  # fmt: skip
    with bare_environment(), ThreadPoolExecutor(WORKERS) as pool:
        running = {name: pool.submit(outcome, argv, here) for name, argv, here in cases}
        return {name: future.result() for name, future in running.items()}


@pytest.mark.parametrize(("name", "argv", "kind"), CASES, ids=[case[0] for case in CASES])
def test_a_dry_run_is_kept(
    name: str, argv: list[str], kind: str, request: pytest.FixtureRequest, scratch: Path
) -> None:
    if kind.startswith("no-aws"):
        got = request.getfixturevalue("without_aws")[name]
    else:
        here = world(kind, request, scratch)
        with bare_environment():
            got = outcome(argv, here)
    path = KEPT / f"{name}.txt"
    if RECORDING:
        KEPT.mkdir(exist_ok=True)
        path.write_bytes(got.encode())
        return
    assert path.exists(), f"{path} is not recorded: RECORD_DRY_RUNS=1 records it"
    kept = path.read_bytes().decode()
    if got != kept:
        diff = difflib.unified_diff(
            kept.splitlines(keepends=True),
            got.splitlines(keepends=True),
            fromfile=f"{path.name} (recorded)",
            tofile=f"{name} (this run)",
        )
        pytest.fail(
            f"the dry run of {name} changed (if on purpose, re-record: RECORD_DRY_RUNS=1):\n"
            + "".join(diff),
            pytrace=False,
        )


def test_every_recorded_file_is_a_case() -> None:
    """Case names are unique, and no recorded file outlives its case (recording removes it)."""
    names = {case[0] for case in CASES}
    assert len(names) == len(CASES)
    stale = [path for path in KEPT.glob("*") if path.stem not in names or path.suffix != ".txt"]
    if RECORDING:
        for path in stale:
            path.unlink()
    assert RECORDING or stale == [], f"files of no case: {stale}"
