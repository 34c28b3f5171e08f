"""`vllm-sagemaker transform` against real engines, the way SageMaker drives a container:
directories and S3 prefixes, MultiRecord and SingleRecord, JoinSource and filters, failures."""

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import API_KEY, KEYED_CALLS
from tests.deploy.batching import no_aws
from tests.support import cli, processes, waiting
from tests.support.json_lines import parse_lines
from tests.support.local_http import fronting
from tests.support.servers import Server, free_port
from tests.support.waiting import A_DAY_S
from vllm_sagemaker.deploy.kit.fleet.jobs import JobSpec, LocalJobs, TransformSettings
from vllm_sagemaker.deploy.kit.fleet.state import Job

JSONL = "application/jsonlines"
LINES = ["--split-type", "Line", "--assemble-with", "Line"]


def transform(
    server: Server, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return cli.run("transform", "--endpoint", server.url, *args, text=True, env=env)


def write_jsonl(path: Path, records: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))


def read_jsonl(path: Path) -> list[Any]:
    return parse_lines(path.read_text())


def test_directory_multirecord_join_and_output_filter(embed_server: Server, tmp_path: Path) -> None:
    """The acceptance case: a 2,000-line file and a 50-line file in a subfolder."""
    # The padding (ignored by the engine) makes the file span two 1 MB mini-batches.
    big = [{"id": i, "input": f"sentence number {i}", "pad": "." * 600} for i in range(2000)]
    big[1000] = "{this line is not JSON\n"
    small = [{"id": f"s{i}", "input": f"small {i}"} for i in range(50)]
    write_jsonl(tmp_path / "in" / "big.jsonl", big)
    write_jsonl(tmp_path / "in" / "sub" / "small.jsonl", small)
    done = transform(
        embed_server,
        *cli.options(
            input=str(tmp_path / "in"),
            output=str(tmp_path / "out"),
            content_type=JSONL,
            accept=JSONL,
            batch_strategy="MultiRecord",
            max_payload_mb="1",
            join_source="Input",
            output_filter="$['id','SageMakerOutput']",
        ),
        *LINES,
    )
    assert done.returncode == 0, done.stderr
    assert "2 of 2 files transformed" in done.stderr
    out = read_jsonl(tmp_path / "out" / "big.jsonl.out")
    assert len(out) == 2000
    assert [line.get("id") for line in out] == [i if i != 1000 else None for i in range(2000)]
    assert out[1000] == {"SageMakerOutput": {"error": out[1000]["SageMakerOutput"]["error"]}}
    assert out[1000]["SageMakerOutput"]["error"]["code"] == "invalid_json"
    assert all(len(line["SageMakerOutput"]["data"][0]["embedding"]) == 384 for line in out[:1000])
    small_out = read_jsonl(tmp_path / "out" / "sub" / "small.jsonl.out")
    assert [line["id"] for line in small_out] == [f"s{i}" for i in range(50)]
    assert all(set(line) == {"id", "SageMakerOutput"} for line in small_out)


def test_input_filter_and_single_record(chat_server: Server, tmp_path: Path) -> None:
    records = [
        {
            "id": i,
            "meta": "kept out of the request",
            "request": {"prompt": f"record {i}", "max_tokens": 1, "echo": True},
        }
        for i in range(5)
    ]
    write_jsonl(tmp_path / "in.jsonl", records)
    done = transform(
        chat_server,
        *cli.options(
            input=str(tmp_path / "in.jsonl"),
            output=str(tmp_path / "out"),
            content_type=JSONL,
            accept=JSONL,
            batch_strategy="SingleRecord",
            input_filter="$.request",
            join_source="Input",
        ),
        *LINES,
    )
    assert done.returncode == 0, done.stderr
    out = read_jsonl(tmp_path / "out" / "in.jsonl.out")
    assert [line["id"] for line in out] == list(range(5))
    assert all(line["meta"] == "kept out of the request" for line in out)
    texts = [line["SageMakerOutput"]["choices"][0]["text"] for line in out]
    assert all(text.startswith(f"record {i}") for i, text in enumerate(texts))


def test_split_none_sends_the_whole_file(chat_server: Server, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in" / "f.jsonl", [{"prompt": "a", "max_tokens": 1}, "\n", {"x": 1}])
    done = transform(
        chat_server,
        *cli.options(input=str(tmp_path / "in"), output=str(tmp_path / "out"), content_type=JSONL),
    )
    assert done.returncode == 0, done.stderr
    out = read_jsonl(tmp_path / "out" / "f.jsonl.out")
    assert "choices" in out[0]
    assert [line["error"]["code"] for line in out[1:]] == ["empty_body", "unrecognized_request"]


def test_a_failed_file_has_no_output_and_the_job_fails(chat_server: Server, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in" / "good.jsonl", [{"prompt": "a", "max_tokens": 1}] * 3)
    write_jsonl(tmp_path / "in" / "huge.jsonl", [{"prompt": "a" * (2 * 1024 * 1024)}])
    done = transform(
        chat_server,
        *cli.options(
            input=str(tmp_path / "in"),
            output=str(tmp_path / "out"),
            content_type=JSONL,
            max_payload_mb="1",
        ),
        *LINES,
    )
    assert done.returncode == 1
    assert "FAILED" in done.stderr and "huge.jsonl" in done.stderr
    assert "MaxPayloadInMB" in done.stderr
    assert len(read_jsonl(tmp_path / "out" / "good.jsonl.out")) == 3
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good.jsonl.out"]


def test_resume_skips_finished_files(chat_server: Server, tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", [{"prompt": name, "max_tokens": 1}])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.jsonl.out").write_text("finished earlier\n")
    args = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), *LINES]
    done = transform(chat_server, *args, "--content-type", JSONL, "--resume")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"transform: 2 of 2 files transformed into {tmp_path / 'out'} (1 done before, skipped "
        "by --resume)"
    )
    assert (tmp_path / "out" / "a.jsonl.out").read_text() == "finished earlier\n"
    assert "choices" in read_jsonl(tmp_path / "out" / "b.jsonl.out")[0]


def test_s3_prefixes_through_moto(chat_server: Server, aws: dict[str, str], tmp_path: Path) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="jobs")
    for name, count in (("data/part-1.jsonl", 4), ("data/more/part-2.jsonl", 2)):
        body = "".join(
            json.dumps({"prompt": f"{name} {i}", "max_tokens": 1}) + "\n" for i in range(count)
        )
        s3.put_object(Bucket="jobs", Key=name, Body=body.encode())
    done = transform(
        chat_server,
        *cli.options(input="s3://jobs/data/", output="s3://jobs/results", content_type=JSONL),
        *LINES,
    )
    assert done.returncode == 0, done.stderr
    keys = sorted(
        o["Key"] for o in s3.list_objects_v2(Bucket="jobs", Prefix="results/")["Contents"]
    )
    assert keys == ["results/more/part-2.jsonl.out", "results/part-1.jsonl.out"]
    out = parse_lines(s3.get_object(Bucket="jobs", Key="results/part-1.jsonl.out")["Body"].read())
    assert len(out) == 4
    assert all("choices" in line for line in out)


def test_a_job_sagemaker_would_refuse_does_not_start(chat_server: Server, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}])
    done = transform(
        chat_server,
        *cli.options(
            input=str(tmp_path / "in.jsonl"),
            output=str(tmp_path / "out"),
            content_type=JSONL,
            join_source="Input",
        ),
    )
    assert done.returncode == 2
    assert "--accept equal to --content-type" in done.stderr
    assert not (tmp_path / "out").exists()


RERANK = [{"query": f"cat {i}", "documents": ["a cat sits", "stocks fell"]} for i in range(3)]


@pytest.mark.parametrize(("key", "env", "refusal"), KEYED_CALLS)
def test_a_keyed_container_answers_with_its_key(
    score_server: Server, tmp_path: Path, key: str | None, env: str, refusal: str | None
) -> None:
    """The score server requires API_KEY: with it every record is answered; without it, or with
    another, the job stops with one line (exit status 2, the job cannot run) and no `.out`."""
    for name in ("a", "b"):
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", RERANK)
    done = transform(
        score_server,
        *cli.options(input=str(tmp_path / "in"), output=str(tmp_path / "out"), content_type=JSONL),
        *LINES,
        *(["--api-key", key] if key else []),
        env={"VLLM_API_KEY": env},
    )
    if refusal is None:
        assert done.returncode == 0, done.stderr
        for name in ("a", "b"):
            answers = read_jsonl(tmp_path / "out" / f"{name}.jsonl.out")
            assert [len(line["results"]) for line in answers] == [2, 2, 2]
        return
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["transform: " + refusal.format(url=score_server.url)]
    assert [path for path in (tmp_path / "out").rglob("*") if path.is_file()] == []


@pytest.mark.parametrize(("key", "status"), [(API_KEY, "Completed"), (None, "Failed")])
def test_local_fleet_jobs_send_the_api_key(
    score_server: Server, tmp_path: Path, key: str | None, status: str
) -> None:
    """`deploy batch --local` runs each shard with the transform runner: the key reaches the
    container; without it the shard fails with the one line that names --api-key."""
    write_jsonl(tmp_path / "shard" / "part.jsonl", RERANK)
    job = Job("try-0-1")
    spec = JobSpec(job.name, str(tmp_path / "shard"), str(tmp_path / "out"), 0)
    jobs = LocalJobs([score_server.url], TransformSettings(), api_key=key)
    asyncio.run(jobs.run(spec, job, lambda: None))
    assert job.status == status
    if key:
        assert len(read_jsonl(tmp_path / "out" / "part.jsonl.out")) == len(RERANK)
    else:
        assert (
            job.reason == f"{score_server.url} wants an API key (HTTP 401): pass it with "
            "--api-key or set VLLM_API_KEY"
        )


@pytest.mark.parametrize(
    ("endpoint", "line"),
    [
        (
            "http://127.0.0.1:{port}",
            "no container at http://127.0.0.1:{port} (connection refused): check the URL, and "
            "that the container runs",
        ),
        (
            "127.0.0.1:{port}",
            "127.0.0.1:{port} is not a container's URL: it has no scheme: write "
            "http://127.0.0.1:{port}",
        ),
        ("ftp://127.0.0.1:{port}", "ftp://127.0.0.1:{port} is not a container's URL: ftp://"),
    ],
)
def test_nobody_at_the_endpoint_is_one_line_at_once(
    tmp_path: Path, endpoint: str, line: str
) -> None:
    """A port where nothing listens, or a URL no container can have, is not a container that is
    starting: the job cannot start (exit status 2), says why in one line, and writes nothing.
    The wait allowed is a day, so a job that took it for a starting container would never end
    here (the suite's timeout fails it): it ends only by the nobody-there rule, with its line."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"prompt": "a"}])
    port = free_port()
    done = cli.run(
        "transform",
        *cli.options(
            endpoint=endpoint.format(port=port),
            input=str(tmp_path / "in"),
            output=str(tmp_path / "out"),
            wait_ready=str(A_DAY_S),
        ),
        text=True,
    )
    assert done.returncode == 2
    (said,) = done.stderr.splitlines()
    assert said.startswith("transform: " + line.format(port=port)), said
    assert not (tmp_path / "out").exists()


def test_a_starting_container_is_waited_for(chat_server: Server, tmp_path: Path) -> None:
    """A container that answers /ping 503 (its engine loading) is waited for, with one line that
    says so; the test lets it turn ready only once the runner has said it waits (an event, not
    a clock), and then every record is answered. Nothing but /ping was sent before."""
    write_jsonl(
        tmp_path / "in" / "a.jsonl", [{"prompt": f"r{i}", "max_tokens": 1} for i in range(6)]
    )
    log = tmp_path / "stderr.txt"
    with fronting(chat_server.url) as (url, container):
        args = cli.options(
            endpoint=url,
            input=str(tmp_path / "in"),
            output=str(tmp_path / "out"),
            content_type=JSONL,
        )
        with log.open("wb") as stderr:
            runner = processes.spawn(
                [cli.VLLM_SAGEMAKER, "transform", *args, *LINES], stderr=stderr
            )
        waiting.until(lambda: b"waiting for" in log.read_bytes(), 60, "no line says it waits")
        assert runner.poll() is None, log.read_text()
        container.ready.set()
        assert runner.wait(300) == 0, log.read_text()
    assert log.read_text().splitlines() == [
        f"transform: waiting for {url} to be ready (HTTP 503 on /ping) up to 600 s",
        f"transform: 1 of 1 files transformed into {tmp_path / 'out'}",
    ]
    out = read_jsonl(tmp_path / "out" / "a.jsonl.out")
    assert len(out) == 6 and all("choices" in line for line in out)
    assert container.early == []


def test_a_container_still_starting_after_wait_ready_stops_the_job(tmp_path: Path) -> None:
    """`--wait-ready` bounds the wait (the container here never turns ready)."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"prompt": "a"}])
    with fronting(f"http://127.0.0.1:{free_port()}") as (url, container):
        done = cli.run(
            "transform",
            *cli.options(
                endpoint=url,
                input=str(tmp_path / "in"),
                output=str(tmp_path / "out"),
                wait_ready="1",
            ),
            text=True,
        )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"transform: waiting for {url} to be ready (HTTP 503 on /ping) up to 1 s",
        f"transform: {url} was not ready after 1 s (HTTP 503 on /ping): wait longer with "
        "--wait-ready, or look at the container's log",
    ]
    assert container.early == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("input_uri", "output", "line"),
    [
        (
            "s3://bucket/in/",
            "{tmp}/out",
            "cannot read s3://bucket/in/: no AWS credentials found",
        ),
        ("{tmp}/missing", "{tmp}/out", "{tmp}/missing does not exist"),
        ("{tmp}/in", "/proc/out", "cannot write /proc/out: no file can be created in /proc"),
        ("{tmp}/in", "{tmp}/in/a.jsonl", "cannot write into {tmp}/in/a.jsonl: it is a file"),
    ],
)
def test_an_unusable_input_or_output_is_one_line_before_any_work(
    tmp_path: Path, input_uri: str, output: str, line: str
) -> None:
    """Found before the container is called (none listens here), with no AWS settings at all:
    exit status 2 and one line."""
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"prompt": "a"}])
    args = cli.options(
        endpoint=f"http://127.0.0.1:{free_port()}",
        input=input_uri.format(tmp=tmp_path),
        output=output.format(tmp=tmp_path),
    )
    done = processes.run([cli.VLLM_SAGEMAKER, "transform", *args], env=no_aws(tmp_path), text=True)
    assert done.returncode == 2
    (said,) = done.stderr.splitlines()
    assert said.startswith("transform: " + line.format(tmp=tmp_path)), said
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in"]
