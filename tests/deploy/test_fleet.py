"""`vllm-sagemaker deploy batch`: an OpenAI batch file cut into shards and run as transform jobs,
on local containers (`--local`) and on "SageMaker" (moto, with tests/support/transform_emulator.py
doing each job's work against real containers as SageMaker documents it)."""

import asyncio
import gzip
import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import API_KEY
from tests.deploy.batching import jsonl
from tests.deploy.deploying import ROLE, deploy, model_options
from tests.deploy.fleets import fleet_args, request, thirty_two_lines
from tests.support import cli
from tests.support.json_lines import parse_lines
from tests.support.servers import Server
from tests.support.transform_emulator import Fleet, transform_emulator
from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.plan import apply
from vllm_sagemaker.deploy.kit.fleet import run as fleet
from vllm_sagemaker.deploy.kit.fleet import state as fleet_state
from vllm_sagemaker.deploy.kit.fleet.jobs import JobSpec
from vllm_sagemaker.deploy.kit.fleet.state import Job, Shard
from vllm_sagemaker.deploy.kit.plans.names import MAX_NAME, job_name
from vllm_sagemaker.deploy.kit.plans.shards import shard_sizes


def stable(line: dict[str, Any]) -> dict[str, Any]:
    """A line without what differs from run to run and server to server: ids, timestamps and
    the serving process's fingerprint."""
    line = {**line, "id": None}
    response = line["response"]
    if response:
        body = {**response["body"], "id": None, "created": None, "system_fingerprint": None}
        line["response"] = {**response, "request_id": None, "body": body}
    return line


def read_s3(uri: str) -> list[dict[str, Any]]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return parse_lines(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def local_fleet(
    tmp_path: Path, lines: bytes, *args: str, **options: str
) -> subprocess.CompletedProcess[str]:
    """`deploy batch ARGS` over `lines`, written to tmp_path/in.jsonl; the output goes to
    tmp_path/out.jsonl and the work prefix is tmp_path/work."""
    (tmp_path / "in.jsonl").write_bytes(lines)
    return deploy(
        "batch",
        *args,
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(tmp_path / "out.jsonl"),
            work_prefix=str(tmp_path / "work"),
            **options,
        ),
    )


def test_local_fleet_answers_as_one_batch_run(
    chat_server: Server, batch_server: Server, tmp_path: Path
) -> None:
    """3 shards on two containers give the same lines, in the same order, as `batch`."""
    fleet = local_fleet(
        tmp_path,
        jsonl(thirty_two_lines()),
        "--local",
        chat_server.url,
        batch_server.url,
        name="local",
        shard_lines="10",
    )
    assert fleet.returncode == 0, fleet.stderr
    assert "30 in 3 shards" in fleet.stderr
    single = cli.run(
        "batch",
        *cli.options(
            input_file=str(tmp_path / "in.jsonl"),
            output_file=str(tmp_path / "single.jsonl"),
            endpoint=chat_server.url,
        ),
    )
    assert single.returncode == 0, single.stderr
    ours = parse_lines((tmp_path / "out.jsonl").read_bytes())
    theirs = parse_lines((tmp_path / "single.jsonl").read_bytes())
    assert len(ours) == 32
    assert [stable(line) for line in ours] == [stable(line) for line in theirs]
    assert sum(line["error"] is None for line in ours) == 30


def test_a_failed_shard_is_in_the_error_file_and_a_rerun_runs_only_it(
    chat_server: Server, batch_server: Server, aws: dict[str, str], tmp_path: Path
) -> None:
    fleet = Fleet(aws["AWS_ENDPOINT_URL"], [chat_server.url, batch_server.url], {"shard-00001"})
    args = fleet_args("fleet-fail", tmp_path)
    with transform_emulator(fleet) as url:
        env = {"AWS_ENDPOINT_URL_SAGEMAKER": url, "SAGEMAKER_ROLE_ARN": ROLE}
        first = deploy("batch", *args, env=env)
        assert first.returncode == 1, first.stderr
        assert "3 shards to run, 2 at a time" in first.stderr
        assert "shard-00002: fleet-fail-00002-1 on slot" in first.stderr
        assert fleet.created == {"shard-00000": 1, "shard-00001": 1, "shard-00002": 1}
        jobs = boto3.client("sagemaker").list_transform_jobs(NameContains="fleet-fail")
        assert sorted(j["TransformJobName"] for j in jobs["TransformJobSummaries"]) == [
            "fleet-fail-00000-1",
            "fleet-fail-00001-1",
            "fleet-fail-00002-1",
        ]
        errors = read_s3("s3://fleet-fail/out/errors.jsonl")
        failed = [line for line in errors if line["error"]["code"] == "shard_failed"]
        assert len(failed) == 10 and "injected by the test" in failed[0]["error"]["message"]
        assert len(errors) == 12 and len(read_s3("s3://fleet-fail/out/output.jsonl")) == 20

        fleet.fail.clear()
        second = deploy("batch", *args, env=env)
        assert second.returncode == 0, second.stderr
        assert fleet.created == {"shard-00000": 1, "shard-00001": 2, "shard-00002": 1}
    output = read_s3("s3://fleet-fail/out/output.jsonl")
    assert [line["custom_id"] for line in output] == [f"q{i}" for i in range(30)]
    assert len(read_s3("s3://fleet-fail/out/errors.jsonl")) == 2
    assert "30 succeeded, 2 failed" in second.stderr


def test_a_cancel_starts_no_new_job_and_keeps_the_finished_shards(
    chat_server: Server, batch_server: Server, aws: dict[str, str], tmp_path: Path
) -> None:
    args = fleet_args("fleet-cancel", tmp_path)

    def cancel_before_the_first_jobs_run(job: str) -> None:
        """Neither first job runs before the cancel is written, so no slot can come free and
        start shard 2 first."""
        if job.endswith(("-00000-1", "-00001-1")):
            done = deploy(
                "batch", "--cancel", *cli.options(name="x", work_prefix="s3://fleet-cancel/work/")
            )
            assert done.returncode == 0, done.stderr

    fleet = Fleet(
        aws["AWS_ENDPOINT_URL"],
        [chat_server.url, batch_server.url],
        on_create=cancel_before_the_first_jobs_run,
    )
    with transform_emulator(fleet) as url:
        env = {"AWS_ENDPOINT_URL_SAGEMAKER": url, "SAGEMAKER_ROLE_ARN": ROLE}
        first = deploy("batch", *args, env=env)
        assert first.returncode == 1, first.stderr
        assert fleet.created == {"shard-00000": 1, "shard-00001": 1}
        output = read_s3("s3://fleet-cancel/out/output.jsonl")
        assert [line["custom_id"] for line in output] == [f"q{i}" for i in range(20)]
        codes = Counter(
            line["error"]["code"] for line in read_s3("s3://fleet-cancel/out/errors.jsonl")
        )
        assert codes == {"batch_cancelled": 10, "invalid_json_line": 1, "duplicate_custom_id": 1}

        second = deploy("batch", *args, env=env)
        assert second.returncode == 0, second.stderr
        assert fleet.created == {"shard-00000": 1, "shard-00001": 1, "shard-00002": 1}
    assert len(read_s3("s3://fleet-cancel/out/output.jsonl")) == 30


class SlowFirstShard:
    """Jobs on two slots: shard 0's job runs until shard `releaser`'s job starts; the others end
    at once. `on_start` runs as each job starts."""

    slots = 2
    can_attach = False

    def __init__(self, releaser: int, on_start: Callable[[int], None] = lambda _: None) -> None:
        self.releaser = releaser
        self.on_start = on_start
        self.release = asyncio.Event()
        self.log: list[tuple[str, int, int]] = []

    async def run(self, spec: JobSpec, job: Job, started: Callable[[], None]) -> None:
        started()
        shard = int(spec.name.split("-")[-2])
        self.log.append(("start", shard, spec.slot))
        self.on_start(shard)
        if shard == self.releaser:
            self.release.set()
        if shard == 0:
            await self.release.wait()
        job.status = "Completed"
        self.log.append(("end", shard, spec.slot))


def run_slots(tmp_path: Path, jobs: SlowFirstShard) -> bool:
    state = fleet_state.Fleet("in.jsonl", "sha256:0", 4, 4, [Shard(i, 1) for i in range(4)])
    layout = fleet.Layout(str(tmp_path / "work"))
    return asyncio.run(asyncio.wait_for(fleet.run_shards(state, layout, jobs, "b"), 120))


def test_a_slot_takes_the_next_shard_as_soon_as_its_job_ends(tmp_path: Path) -> None:
    """Shards 1, 2 and 3 run one after another on slot 1 while shard 0 still runs on slot 0
    (waves would wait for shard 0 before starting shard 2, and time out here)."""
    jobs = SlowFirstShard(releaser=3)
    assert run_slots(tmp_path, jobs)
    assert jobs.log == [
        ("start", 0, 0),
        ("start", 1, 1),
        ("end", 1, 1),
        ("start", 2, 1),
        ("end", 2, 1),
        ("start", 3, 1),
        ("end", 3, 1),
        ("end", 0, 0),
    ]


def test_a_cancel_lets_running_jobs_end_and_starts_no_other(tmp_path: Path) -> None:
    def cancel_at_shard_1(shard: int) -> None:
        if shard == 1:
            apply(fleet.cancel_plan(str(tmp_path / "work")), dry_run=False)

    jobs = SlowFirstShard(releaser=1, on_start=cancel_at_shard_1)
    assert not run_slots(tmp_path, jobs)
    assert sorted(jobs.log) == [("end", 0, 0), ("end", 1, 1), ("start", 0, 0), ("start", 1, 1)]


def test_lines_whose_jobs_did_not_answer_are_not_counted_as_answered(tmp_path: Path) -> None:
    """Shards whose job failed, never started, completed with no output, or started and has not
    ended: their lines get error lines, and the summary says each (not "answered, failed")."""
    source = tmp_path / "in.jsonl"
    source.write_bytes(jsonl([request(i) for i in range(8)]))
    shards = [
        Shard(0, 3, [Job("b-00000-1", "Failed", "no /ping")]),
        Shard(1, 2),
        Shard(2, 1, [Job("b-00002-1", "Completed")]),
        Shard(3, 2, [Job("b-00003-1")]),
    ]
    state = fleet_state.Fleet(str(source), "sha256:0", 8, 8, shards)
    output = tmp_path / "out.jsonl"
    summary = fleet.merge(
        state, fleet.Layout(str(tmp_path / "work")), str(source), str(output), None
    )
    assert fleet.report(summary, state, None, False) == (
        "0 lines answered (0 succeeded, 0 failed), 3 lines not run (their jobs failed), 2 lines "
        "not run (their jobs did not start), 1 lines not run (their jobs completed, wrote no "
        "output), 2 lines not run (their jobs started, not yet ended), 0 prompt + 0 completion "
        "tokens, 0.000 instance-hours (incomplete: run the same command again to finish)"
    )
    codes = [line["error"]["code"] for line in parse_lines(output.read_bytes())]
    assert (
        codes
        == ["shard_failed"] * 3
        + ["batch_cancelled"] * 2
        + ["shard_no_output"]
        + ["shard_running"] * 2
    )


def test_dry_run_prints_one_job_per_shard(aws: dict[str, str], tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(jsonl([request(i) for i in range(25)]))
    done = deploy(
        "batch",
        "--dry-run",
        *model_options(
            "dry",
            "ml.g5.2xlarge",
            instance_count="2",
            input_file=str(source),
            output_file="s3://dry/out.jsonl",
            work_prefix="s3://dry/work/",
            shard_lines="10",
        ),
        env={"SAGEMAKER_ROLE_ARN": ROLE},
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)
    assert [c["operation"] for c in calls] == (
        ["PutObject"] * 4 + ["CreateModel"] + ["CreateTransformJob"] * 3 + ["PutObject"]
    )
    assert [c["params"]["Key"] for c in calls if c["operation"] == "PutObject"] == [
        "work/shards/shard-00000/input.jsonl",
        "work/shards/shard-00001/input.jsonl",
        "work/shards/shard-00002/input.jsonl",
        "work/fleet.json",
        "out.jsonl",
    ]
    jobs = [c["params"] for c in calls if c["operation"] == "CreateTransformJob"]
    assert [j["TransformJobName"] for j in jobs] == ["dry-00000-1", "dry-00001-1", "dry-00002-1"]
    assert {j["ModelName"] for j in jobs} == {"dry"}
    assert {j["TransformResources"]["InstanceCount"] for j in jobs} == {1}
    assert jobs[2]["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"] == (
        "s3://dry/work/shards/shard-00002/"
    )
    assert jobs[2]["TransformOutput"]["S3OutputPath"] == "s3://dry/work/output/shard-00002/"


def test_a_local_dry_run_prints_the_shards_and_runs_nothing(tmp_path: Path) -> None:
    done = local_fleet(
        tmp_path,
        jsonl(thirty_two_lines()),
        "--dry-run",
        "--local",
        "http://127.0.0.1:9",
        "http://127.0.0.1:9",
        name="try",
        shard_lines="10",
    )
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    assert (state["lines"], state["requests"]) == (32, 30)
    assert [shard["lines"] for shard in state["shards"]] == [10, 10, 10]
    assert not (tmp_path / "work").exists() and not (tmp_path / "out.jsonl").exists()


def test_a_file_with_no_valid_line_starts_nothing(tmp_path: Path) -> None:
    done = local_fleet(
        tmp_path, b'{"custom_id": "a"}\n{broken\n', "--local", "http://127.0.0.1:9", name="none"
    )
    assert done.returncode == 2
    assert "no valid request line (2 lines)" in done.stderr
    assert "line 1: missing_required_parameter" in done.stderr
    assert not (tmp_path / "work").exists() and not (tmp_path / "out.jsonl").exists()


def test_a_remote_input_is_downloaded_once_and_read_from_the_copy(
    aws: dict[str, str], tmp_path: Path
) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="copy")
    lines = jsonl([request(i) for i in range(3)])
    s3.put_object(Bucket="copy", Key="in.jsonl.gz", Body=gzip.compress(lines))
    with storage.local_copy("s3://copy/in.jsonl.gz") as path:
        s3.delete_object(Bucket="copy", Key="in.jsonl.gz")
        for _ in range(2):
            with storage.reading(path) as copy:
                assert copy.read() == lines
    assert not Path(path).exists()
    local = tmp_path / "in.jsonl"
    local.write_bytes(lines)
    with storage.local_copy(str(local)) as path:
        assert path == str(local)
    assert local.exists()


@pytest.mark.parametrize(
    ("requests", "instances", "shard_lines", "sizes"),
    [
        (30, 2, 10, [10, 10, 10]),
        (5, 8, 100, [1, 1, 1, 1, 1]),  # never more shards than lines
        (100, 4, 1000, [25, 25, 25, 25]),  # at least one shard per instance
        (7, 2, 3, [3, 2, 2]),
        (0, 2, 10, []),
    ],
)
def test_shard_sizes(requests: int, instances: int, shard_lines: int, sizes: list[int]) -> None:
    assert shard_sizes(requests, instances, shard_lines) == sizes


def test_job_names_stay_valid() -> None:
    name = job_name("a-very-long-batch-name-" * 4, 12, 3)
    assert len(name) <= MAX_NAME and name.endswith("-00012-3")


@pytest.mark.parametrize("key", [API_KEY, None])
def test_a_local_fleet_sends_the_api_key(
    score_server: Server, tmp_path: Path, key: str | None
) -> None:
    """`deploy batch --local URL --api-key K` against a keyed container: every line answered;
    without the key each shard fails, its lines' errors naming --api-key."""
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/rerank",
            "body": {"query": f"cat {i}", "documents": ["a cat sits", "stocks fell"]},
        }
        for i in range(4)
    ]
    done = local_fleet(
        tmp_path,
        jsonl(lines),
        "--local",
        score_server.url,
        *(["--api-key", key] if key else []),
        name="keyed",
        error_file=str(tmp_path / "errors.jsonl"),
    )
    output = parse_lines((tmp_path / "out.jsonl").read_bytes())
    errors = parse_lines((tmp_path / "errors.jsonl").read_bytes())
    if key:
        assert done.returncode == 0, done.stderr
        assert [line["custom_id"] for line in output] == ["r0", "r1", "r2", "r3"]
        assert [len(line["response"]["body"]["results"]) for line in output] == [2] * 4
        assert errors == []
        return
    assert done.returncode == 1
    assert output == [] and [line["custom_id"] for line in errors] == ["r0", "r1", "r2", "r3"]
    assert all("wants an API key" in line["error"]["message"] for line in errors)
