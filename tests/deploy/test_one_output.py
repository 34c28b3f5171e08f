"""One output, one run: a second `vllm-sagemaker batch` on an output a run holds is refused
with one line naming the first run's pid, before it reads anything, whatever the output is
(stdout, a `.gz` file named another way, S3, a plain file); the first run then delivers its own
lines only. Two stdout runs staged in their own --output-tmp-dir run side by side.

The first run is in flight by construction: the stand-in container (`tests.deploy.holding`)
holds its mini-batch until the test lets it go."""

import gzip
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.deploy.batching import completion, jsonl, read
from tests.deploy.holding import Holding, holding
from tests.support import cli, processes
from vllm_sagemaker.deploy.batch.staging import lock_dir

# Where nothing listens: a run refused before it calls a container never notices.
NOBODY = "http://127.0.0.1:9"


def start(tmp_path: Path, name: str, output: str, url: str, staging: str) -> subprocess.Popen[Any]:
    """A run in `tmp_path` of the input `name` (two lines, ids after it) to `output`, its
    stdout in `name`.stdout."""
    (tmp_path / name).write_bytes(jsonl([completion(f"{name}-{i}") for i in range(2)]))
    args = cli.options(input_file=name, output_file=output, endpoint=url, output_tmp_dir=staging)
    with (tmp_path / f"{name}.stdout").open("wb") as stdout:
        return processes.spawn(
            [cli.VLLM_SAGEMAKER, "batch", *args],
            cwd=tmp_path,
            stdout=stdout,
            stderr=subprocess.PIPE,
        )


def finished(runner: subprocess.Popen[Any], container: Holding) -> int:
    """Let the held mini-batch go; the run's exit status."""
    container.release.set()
    try:
        _, stderr = runner.communicate(timeout=120)
    finally:
        processes.kill(runner)
    assert runner.returncode == 0, stderr
    return runner.returncode


def delivered(tmp_path: Path, output: str) -> list[str]:
    """The custom_ids `output` holds once delivered."""
    if output == "-":
        data = (tmp_path / "first.jsonl.stdout").read_bytes()
    elif output.startswith("s3://"):
        data = boto3.client("s3").get_object(Bucket="outputs", Key="out.jsonl")["Body"].read()
    else:
        data = (tmp_path / output).read_bytes()
    if output.endswith(".gz"):
        data = gzip.decompress(data)
    return [line["custom_id"] for line in read(data)]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("-", "-"),
        ("out.jsonl.gz", "./out.jsonl.gz"),
        ("s3://outputs/out.jsonl", "s3://outputs/out.jsonl"),
        ("out.jsonl", "sub/../out.jsonl"),
    ],
)
def test_a_second_run_on_one_output_is_refused(
    first: str, second: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if first.startswith("s3://"):
        request.getfixturevalue("aws")
        boto3.client("s3").create_bucket(Bucket="outputs")
    (tmp_path / "sub").mkdir()
    staging = str(tmp_path / "staging")
    with holding(hold_after=0) as (url, container):
        runner = start(tmp_path, "first.jsonl", first, url, staging)
        try:
            container.until_held(1)
            (tmp_path / "second.jsonl").write_bytes(jsonl([completion("second")]))
            options = cli.options(
                input_file="second.jsonl", output_file=second, endpoint=url, output_tmp_dir=staging
            )
            refused = processes.run([cli.VLLM_SAGEMAKER, "batch", *options], cwd=tmp_path)
            assert container.posts == 1
        finally:
            finished(runner, container)
    local = first != "-" and "://" not in first
    directory = lock_dir(str(tmp_path / first) if local else first, staging)
    name = "standard output (-)" if second == "-" else second
    line = f"another run (pid {runner.pid}) is writing {name}"
    if first == "out.jsonl":
        line += ": wait for it to end"
    else:
        line += f", staged in {directory}: wait for it to end, or give this run another "
        line += "--output-tmp-dir"
    assert refused.returncode == 1
    assert refused.stderr.decode().splitlines() == [f"batch: {line}"]
    assert delivered(tmp_path, first) == ["first.jsonl-0", "first.jsonl-1"]
    assert not directory.exists()


def test_two_stdout_runs_staged_apart_run_side_by_side(tmp_path: Path) -> None:
    """Each holds its own staging directory: both are in flight at once, and each prints its
    own lines."""
    with holding(hold_after=0) as (url, container):
        runners = [
            start(tmp_path, name, "-", url, str(tmp_path / name.replace("jsonl", "staging")))
            for name in ("first.jsonl", "second.jsonl")
        ]
        container.until_held(2)
        for runner in runners:
            finished(runner, container)
    for name in ("first.jsonl", "second.jsonl"):
        answers = read((tmp_path / f"{name}.stdout").read_bytes())
        assert [line["custom_id"] for line in answers] == [f"{name}-0", f"{name}-1"]


def test_an_error_file_that_is_the_output_is_refused(tmp_path: Path) -> None:
    """One run, one writer per file: the error file cannot be the output, however named."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    options = cli.options(
        input_file="in.jsonl", output_file="out.jsonl", error_file="./out.jsonl", endpoint=NOBODY
    )
    done = processes.run([cli.VLLM_SAGEMAKER, "batch", *options], cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "batch: cannot write ./out.jsonl: it is the output itself; give --error-file a path of "
        "its own"
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl"]
