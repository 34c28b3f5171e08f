"""Ctrl-C (SIGINT) to a real `vllm-sagemaker` process, in each state it can wait in: waiting
for a container that never becomes ready (`transform`, `batch --endpoint`), with requests in
flight (then `--resume` answers every line once), and stopping slowly (a second Ctrl-C ends it
at once). Each ends with one line on stderr, exit status 130 and no traceback.

What must be pending when the signal lands is pending by construction: the stand-in container
(`tests.deploy.holding`) answers /ping 503 until told otherwise or holds the mini-batches the
test chooses, the engine of the last test is frozen before the run starts, and the stand-in
`serve` of the slow stop ignores SIGTERM."""

import gzip
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.deploy.batching import (
    REFUSED,
    batch,
    completion,
    held_mid_run,
    jsonl,
    line_count,
    read,
    refused_first,
)
from tests.deploy.deploying import ROLE, model_options
from tests.deploy.holding import holding
from tests.support import cli, processes, waiting
from tests.support.aws import REGION, moto_endpoint
from tests.support.runtime_emulator import Runtime, runtime_emulator
from tests.support.servers import Server
from tests.support.transform_emulator import Fleet, transform_emulator
from vllm_sagemaker.deploy.batch.minibatches import LINES_PER_REQUEST
from vllm_sagemaker.deploy.batch.staging import lock_dir, staged_path

RESUME = "run the same command with --resume to finish"
AGAIN = "run the same command again"


def interrupted(args: list[str], log: Path, until: Any, **popen: Any) -> tuple[int, list[str]]:
    """Run `vllm-sagemaker ARGS` (stderr to `log`), wait for `until()`, send SIGINT; its exit
    status and its stderr's lines, asserting there is no traceback."""
    with log.open("wb") as stderr:
        runner = processes.spawn(
            [cli.VLLM_SAGEMAKER, *args], stdout=subprocess.DEVNULL, stderr=stderr, **popen
        )
    try:
        waiting.until(lambda: runner.poll() is not None or until(), 120, "the state never came")
        assert runner.poll() is None, log.read_text()
        runner.send_signal(signal.SIGINT)
        status = runner.wait(120)
    finally:
        processes.kill(runner)
    text = log.read_text()
    assert "Traceback" not in text, text
    return status, text.splitlines()


def said(log: Path, text: str) -> Any:
    return lambda: log.exists() and text in log.read_text()


@pytest.mark.parametrize("command", ["transform", "batch"])
def test_ctrl_c_while_waiting_for_a_container(command: str, tmp_path: Path) -> None:
    """A container whose /ping answers 503 for ever is waited for; Ctrl-C then stops the
    command with one line that says nothing was written, and nothing is."""
    inputs, log = tmp_path / "in", tmp_path / "stderr.txt"
    inputs.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (inputs / name).write_bytes(jsonl([completion(name)]))
    with holding(ready=False) as (url, _):
        if command == "transform":
            output = tmp_path / "out"
            args = cli.options(endpoint=url, input=str(inputs), output=str(output))
            line = f"none of 2 files transformed, nothing written to {output}"
        else:
            output = tmp_path / "out.jsonl"
            args = cli.options(
                input_file=str(inputs / "a.jsonl"), output_file=str(output), endpoint=url
            )
            line = f"no line answered, nothing written to {output}"
        status, lines = interrupted([command, *args], log, said(log, "waiting for"))
    assert status == 130
    assert lines == [
        f"{command}: waiting for {url} to be ready (HTTP 503 on /ping) up to 600 s",
        f"{command}: stopped: {line}; {AGAIN}",
    ]
    assert not output.exists()


@pytest.mark.parametrize("name", ["out.jsonl", "out.jsonl.gz"])
def test_ctrl_c_in_flight_keeps_whole_lines_and_resume_finishes(name: str, tmp_path: Path) -> None:
    """Three mini-batches, two in flight at a time (--max-inflight 64): the stand-in answers the
    first and holds the next two, so Ctrl-C lands with exactly 32 lines answered and two
    requests in flight. They are closed, the 32 lines are kept whole (in the output, or staged
    for a `.gz`), and --resume answers the other 64, every line once and in order."""
    ids = [f"r{i}" for i in range(3 * LINES_PER_REQUEST)]
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion(i) for i in ids]))
    output, staging, log = tmp_path / name, tmp_path / "staging", tmp_path / "stderr.txt"
    args = [
        "batch",
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(output),
            output_tmp_dir=str(staging),
            max_inflight=str(2 * LINES_PER_REQUEST),
        ),
    ]
    staged = Path(staged_path(str(output), str(staging)))
    kept = output if staged == output else f"{staged} (staged for {output})"
    with holding(hold_after=1) as (url, container):
        # Held, and the first mini-batch's answers written: nothing else can move until release.
        status, lines = interrupted(
            [*args, "--endpoint", url],
            log,
            lambda: container.held == 2 and line_count(staged) == LINES_PER_REQUEST,
        )
        assert container.posts == 3
    assert status == 130
    # The last line (a progress line may come before it on a machine slow enough).
    assert lines[-1] == (
        f"batch: stopped: {LINES_PER_REQUEST} lines answered and kept in {kept}; {RESUME}"
    )
    assert [line["custom_id"] for line in read(staged.read_bytes())] == ids[:LINES_PER_REQUEST]
    with holding() as (url, container):
        done = batch(*args[1:], "--endpoint", url, "--resume")
        assert container.posts == 2
    assert done.returncode == 0, done.stderr
    assert f"{LINES_PER_REQUEST} from before".encode() in done.stderr
    data = output.read_bytes()
    answers = read(gzip.decompress(data) if name.endswith(".gz") else data)
    assert [line["custom_id"] for line in answers] == ids
    assert not lock_dir(str(output), str(staging)).exists()
    assert not any(staging.glob("*"))


def test_ctrl_c_with_a_call_to_a_sagemaker_endpoint_in_flight(
    aws: dict[str, str], tmp_path: Path
) -> None:
    """InvokeEndpoint runs on a thread that nothing can stop, held here until the test ends
    (the emulator forwards to the stand-in, which holds every mini-batch): Ctrl-C still ends
    the run at once with its line, rather than when the call returns."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    output, log = tmp_path / "out.jsonl", tmp_path / "stderr.txt"
    with (
        moto_endpoint("held") as name,
        holding(hold_after=0) as (url, container),
        runtime_emulator(Runtime({name: url})) as runtime,
    ):
        args = cli.options(
            input_file=str(tmp_path / "in.jsonl"), output_file=str(output), sagemaker_endpoint=name
        )
        env = {**os.environ, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": runtime}
        status, lines = interrupted(["batch", *args], log, lambda: container.held == 1, env=env)
    assert status == 130
    assert lines == [f"batch: stopped: no line answered, nothing written to {output}; {AGAIN}"]
    assert not output.exists()


def test_ctrl_c_while_deploy_waits_for_its_transform_job(
    aws: dict[str, str], tmp_path: Path
) -> None:
    """`deploy transform` waits for its job, which stays InProgress (the emulator's job waits
    for a container that never gets ready). Ctrl-C stops the wait, not the job: the line says
    it goes on, and how to check it or stop it."""
    name, log = f"waited-{uuid.uuid4().hex[:8]}", tmp_path / "stderr.txt"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="in/requests.jsonl", Body=jsonl([completion("a")]))
    options = model_options(
        name, "ml.g5.2xlarge", input=f"s3://{name}/in/", output=f"s3://{name}/out/"
    )
    with (
        holding(ready=False) as (container, _),
        transform_emulator(Fleet(aws["AWS_ENDPOINT_URL"], [container])) as sagemaker,
    ):
        env = {**os.environ, "AWS_ENDPOINT_URL_SAGEMAKER": sagemaker, "SAGEMAKER_ROLE_ARN": ROLE}
        status, lines = interrupted(
            ["deploy", "transform", *options], log, said(log, "InProgress"), env=env
        )
    assert status == 130
    region = f"--region {REGION}"
    assert lines[-1] == (
        f"deploy: stopped: transform job {name} (InProgress) goes on in SageMaker without this "
        f"command; check it with aws sagemaker describe-transform-job --transform-job-name {name} "
        f"{region}, or stop it with aws sagemaker stop-transform-job --transform-job-name {name} "
        f"{region}"
    )
    job = boto3.client("sagemaker").describe_transform_job(TransformJobName=name)
    assert job["TransformJobName"] == name


def test_ctrl_c_in_a_transform_keeps_the_files_done(tmp_path: Path) -> None:
    """Two files, one request each, one at a time: the stand-in answers the first and holds the
    second, so Ctrl-C lands with `a.jsonl.out` written and `b.jsonl`'s request in flight. No
    half-written `.out` is left (nor its temporary file), and --resume sends only `b.jsonl`."""
    inputs, output, log = tmp_path / "in", tmp_path / "out", tmp_path / "stderr.txt"
    inputs.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (inputs / name).write_bytes(jsonl([completion(name)]))
    args = ["transform", *cli.options(input=str(inputs), output=str(output))]
    with holding(hold_after=1) as (url, container):
        status, lines = interrupted([*args, "--endpoint", url], log, lambda: container.held == 1)
    assert status == 130
    assert lines == [f"transform: stopped: 1 of 2 files transformed and kept in {output}; {RESUME}"]
    assert sorted(path.name for path in output.iterdir()) == ["a.jsonl.out"]
    with holding() as (url, container):
        done = cli.run(*args, "--endpoint", url, "--resume")
        assert container.posts == 1
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in output.iterdir()) == ["a.jsonl.out", "b.jsonl.out"]
    assert [line["custom_id"] for line in read((output / "b.jsonl.out").read_bytes())] == [
        "b.jsonl"
    ]


# A stand-in for `serve` that never gets ready and does not stop on SIGTERM (it writes that it
# got it), so the runner's stop waits for it: a slow stop by construction. It ends once the
# runner is gone (and takes the mark's path as the option vLLM would get).
SLOW_SERVE = """\
    import os, signal, sys, time
    mark = sys.argv[sys.argv.index("--mark") + 1]
    parent = os.getppid()
    def note(text):
        with open(mark, "a") as out:
            out.write(text + "\\n")
    signal.signal(signal.SIGTERM, lambda *_: note("SIGTERM"))
    note(f"started {os.getpid()}")
    while os.getppid() == parent:
        time.sleep(0.05)
"""

# The `vllm-sagemaker` console script's own code, with `serve` looked for beside another
# interpreter path (the first argument), where the test puts SLOW_SERVE.
LAUNCH = (
    "import sys; sys.executable = sys.argv.pop(1); "
    "from vllm_sagemaker.container.cli import main; sys.exit(main())"
)


def test_a_second_ctrl_c_ends_a_slow_stop_at_once(tmp_path: Path) -> None:
    """`batch --model` waits for its engine; the first Ctrl-C stops the wait and the runner
    stops the engine with SIGTERM, which this stand-in ignores (a minute's wait). The second
    Ctrl-C ends the runner at once: its one line, exit status 130, no traceback; the stand-in
    then ends as its runner is gone."""
    bin_dir, mark, log = tmp_path / "bin", tmp_path / "serve.mark", tmp_path / "stderr.txt"
    bin_dir.mkdir()
    serve = bin_dir / "serve"
    serve.write_text(f"#!{sys.executable}\n" + textwrap.dedent(SLOW_SERVE))
    serve.chmod(0o755)
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    args = cli.options(input_file=str(tmp_path / "in.jsonl"), output_file=str(tmp_path / "o"))
    args += ["--model", "/no/model", "--mark", str(mark)]
    with log.open("wb") as stderr:
        runner = processes.spawn(
            [sys.executable, "-c", LAUNCH, str(bin_dir / "python"), "batch", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    stand_in = 0
    try:
        waiting.until(said(mark, "started"), 120, "the stand-in serve never started")
        stand_in = int(mark.read_text().split()[1])
        runner.send_signal(signal.SIGINT)
        waiting.until(said(mark, "SIGTERM"), 120, "the runner never stopped its engine")
        assert runner.poll() is None, log.read_text()
        runner.send_signal(signal.SIGINT)
        status = runner.wait(30)
        waiting.until(lambda: not Path(f"/proc/{stand_in}").exists(), 60, "the stand-in lives")
    finally:
        processes.kill(runner)
        if stand_in and Path(f"/proc/{stand_in}").exists():
            os.kill(stand_in, signal.SIGKILL)
    assert status == 130
    assert log.read_text().splitlines() == [f"batch: stopped at once by a second Ctrl-C; {RESUME}"]


def test_ctrl_c_with_lines_in_the_engine_then_resume(chat_server: Server, tmp_path: Path) -> None:
    """The engine is frozen before the run starts, so Ctrl-C lands mid-run by construction: the
    run has answered its first REFUSED lines (refused without the engine) and holds the next
    ones in the engine. It closes them and says what it kept; --resume answers the rest, every
    line once."""
    lines = [completion(f"r{i}", f"line {i}", tokens=24) for i in range(500)]
    (tmp_path / "in.jsonl").write_bytes(jsonl(refused_first(lines)))
    output, log = tmp_path / "out.jsonl", tmp_path / "stderr.txt"
    args = [
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(output),
            endpoint=chat_server.url,
            max_inflight="64",
        )
    ]
    with chat_server.paused():
        with log.open("wb") as stderr:
            runner = processes.spawn([cli.VLLM_SAGEMAKER, "batch", *args], stderr=stderr)
        try:
            held_mid_run(runner, REFUSED, output)
            runner.send_signal(signal.SIGINT)
            status = runner.wait(120)
        finally:
            processes.kill(runner)
    assert status == 130
    text = log.read_text()
    assert "Traceback" not in text, text
    assert text.splitlines()[-1] == (
        f"batch: stopped: {REFUSED} lines answered and kept in {output}; {RESUME}"
    )
    assert line_count(output) == REFUSED
    done = batch(*args, "--resume")
    assert done.returncode == 0, done.stderr
    answers = read(output.read_bytes())
    assert Counter(line["custom_id"] for line in answers) == Counter(f"r{i}" for i in range(500))
    assert [line["custom_id"] for line in answers] == [f"r{i}" for i in range(500)]
    statuses = [line["response"]["status_code"] for line in answers]
    assert statuses == [400] * REFUSED + [200] * (500 - REFUSED)
    assert f"{REFUSED} from before".encode() in done.stderr
