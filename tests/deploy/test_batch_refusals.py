"""`vllm-sagemaker batch` stops before any work, with one line, and creates nothing: a missing
or unusable input or output, a staging directory others can enter, nobody at the endpoint, or no
AWS region for an endpoint."""

import subprocess
from pathlib import Path

import pytest

from tests.deploy.batching import batch, completion, jsonl, no_aws
from tests.support import cli, processes
from tests.support.servers import free_port
from tests.support.waiting import A_DAY_S
from vllm_sagemaker.deploy.batch.staging import staged_path


def stopped_early(tmp_path: Path, output: str) -> subprocess.CompletedProcess[bytes]:
    """A run to `output` that stops before its first answer (its input does not exist)."""
    done = batch(
        *cli.options(
            input_file=str(tmp_path / "missing.jsonl"),
            output_file=output,
            endpoint="http://127.0.0.1:9",
            output_tmp_dir=str(tmp_path / "staging"),
        )
    )
    assert done.returncode == 1
    (said,) = done.stderr.decode().splitlines()
    if not output.startswith("s3://"):  # an S3 output's bucket is checked first
        assert said == f"batch: cannot read {tmp_path / 'missing.jsonl'}: No such file or directory"
    return done


@pytest.mark.parametrize("output", ["new/out.jsonl", "new/out.jsonl.gz", "s3://none/out.jsonl"])
def test_a_run_that_stops_before_its_first_answer_creates_nothing(
    tmp_path: Path, output: str
) -> None:
    """No output file, no parent folder, no staging directory."""
    stopped_early(tmp_path, output if output.startswith("s3://") else str(tmp_path / output))
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_stops_before_its_first_answer_keeps_an_earlier_output(tmp_path: Path) -> None:
    earlier = tmp_path / "out.jsonl"
    earlier.write_text("an answer of an earlier run\n")
    stopped_early(tmp_path, str(earlier))
    assert earlier.read_text() == "an answer of an earlier run\n"


def test_a_staging_directory_others_can_enter_is_refused(tmp_path: Path) -> None:
    """Another user may have made the directory a run would stage in (its name is known): the
    run refuses it before it reads the input."""
    output = str(tmp_path / "out.jsonl.gz")
    shared = Path(staged_path(output, str(tmp_path))).parent
    shared.mkdir()
    shared.chmod(0o755)
    done = batch(
        *cli.options(
            input_file=str(tmp_path / "missing.jsonl"),
            output_file=output,
            endpoint="http://127.0.0.1:9",
            output_tmp_dir=str(tmp_path),
        )
    )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"batch: the staging directory {shared} is open to other users (mode 755): remove it, "
        "or stage elsewhere with --output-tmp-dir"
    ]
    assert sorted(tmp_path.iterdir()) == [shared]


def test_a_missing_input_stops_before_any_engine_starts(tmp_path: Path) -> None:
    done = batch(
        "-i",
        str(tmp_path / "nope.jsonl"),
        "-o",
        str(tmp_path / "out.jsonl"),
        "--model",
        "/no/such/model",
    )
    assert done.returncode == 1
    assert b"cannot read" in done.stderr and b"nope.jsonl" in done.stderr


def test_nobody_at_the_endpoint_is_one_line_at_once(tmp_path: Path) -> None:
    """A port where nothing listens is a wrong URL, not a container starting: the run stops at
    once, creates nothing, and does not suggest --resume, which could not help. The wait allowed
    is a day, so a run that took the refusal for a starting container would never end here (the
    suite's timeout fails it): it ends only by the nobody-there rule, with its line."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    dead = f"http://127.0.0.1:{free_port()}"
    done = batch(
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(tmp_path / "out.jsonl"),
            endpoint=dead,
            wait_ready=str(A_DAY_S),
        )
    )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"batch: no container at {dead} (connection refused): check the URL, and that the "
        "container runs"
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["-o", "/proc/out.jsonl"],
            "cannot write /proc/out.jsonl: no file can be created in /proc",
        ),
        (["-o", "{tmp}/data"], "cannot write {tmp}/data: it is a directory; give a file's path"),
        (["-o", "{tmp}/data/"], "cannot write {tmp}/data/: it is a directory; give a file's path"),
        (["-o", "{tmp}/new/"], "cannot write {tmp}/new/: a file's path cannot end in /"),
        (
            ["--error-file", "/proc/errors.jsonl"],
            "cannot write /proc/errors.jsonl: no file can be created in /proc",
        ),
        (
            ["-o", "{tmp}/out.jsonl.gz", "--output-tmp-dir", "/proc/staging"],
            "cannot write /proc/staging/vllm-sagemaker-batch-",
        ),
        (["-i", "{tmp}/data"], "cannot read {tmp}/data: Is a directory"),
        (["-i", "{tmp}/plain.jsonl.gz"], "cannot read {tmp}/plain.jsonl.gz: Not a gzipped file"),
    ],
)
def test_an_unusable_input_or_output_is_one_line_before_any_work(
    tmp_path: Path, args: list[str], line: str
) -> None:
    """Found before the container is called (none listens here) and before anything is
    created: exit status 1 and one line."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    (tmp_path / "plain.jsonl.gz").write_bytes(jsonl([completion("a")]))
    (tmp_path / "data").mkdir()
    named = {"-i": str(tmp_path / "in.jsonl"), "-o": str(tmp_path / "out.jsonl")}
    given = [arg.format(tmp=tmp_path) for arg in args]
    for option, value in named.items():
        if option not in given:
            given += [option, value]
    done = batch(*given, "--endpoint", f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 1
    (said,) = done.stderr.decode().splitlines()
    assert said.startswith("batch: " + line.format(tmp=tmp_path)), said
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "data",
        "in.jsonl",
        "plain.jsonl.gz",
    ]
    assert list((tmp_path / "data").iterdir()) == []


def test_an_endpoint_without_a_region_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    args = ["-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")]
    done = processes.run(
        [cli.VLLM_SAGEMAKER, "batch", *args, "--sagemaker-endpoint", "llama"],
        env=no_aws(tmp_path),
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "batch: endpoint llama: no AWS region: give --region, or set AWS_REGION "
        "(or AWS_DEFAULT_REGION)"
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--max-inflight", "0"], "--max-inflight 0: must be at least 1"),
        (["--max-inflight", "-3"], "--max-inflight -3: must be at least 1"),
        (["--api-key", "k", "--sagemaker-endpoint", "llama"], "--api-key goes with --endpoint"),
    ],
)
def test_a_refused_option_is_one_line_and_exit_status_2(
    tmp_path: Path, args: list[str], line: str
) -> None:
    """Refused before any work: nothing listens at the endpoint, nothing is created."""
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a")]))
    target = [] if "--sagemaker-endpoint" in args else ["--endpoint", "http://127.0.0.1:9"]
    done = batch(
        "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), *args, *target
    )
    assert done.returncode == 2
    (said,) = done.stderr.decode().splitlines()
    assert said.startswith("batch: " + line), said
    assert [path.name for path in tmp_path.iterdir()] == ["in.jsonl"]
