"""One output, one staging directory: it is named after the output as it resolves, so two
spellings of one file (or a presigned URL signed again) find the same directory, its lock and
its answers; and the line that refuses a second run on a held output."""

import os
from pathlib import Path

import pytest

from vllm_sagemaker.deploy.batch.staging import busy_line, lock_dir, staged_path, staging_dir

TMP = "/staging"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("out.jsonl.gz", "./out.jsonl.gz"),
        ("out.jsonl.gz", "sub/../out.jsonl.gz"),
        ("out.jsonl.gz", "{cwd}/out.jsonl.gz"),
        ("link.jsonl.gz", "out.jsonl.gz"),
        ("https://h/out.jsonl?X-Amz-Signature=1", "https://h/out.jsonl?X-Amz-Signature=2"),
        ("-", "-"),
        ("s3://b/out.jsonl", "s3://b/out.jsonl"),
    ],
)
def test_one_output_spelled_two_ways_is_staged_once(
    one: str, other: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "out.jsonl.gz", tmp_path / "link.jsonl.gz")
    other = other.format(cwd=tmp_path)
    assert staged_path(one, TMP) == staged_path(other, TMP)
    assert staged_path(one, TMP).startswith(f"{TMP}/vllm-sagemaker-batch-{os.getuid()}-")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("out.jsonl.gz", "other.jsonl.gz"),
        ("sub/out.jsonl.gz", "out.jsonl.gz"),
        ("https://h/out.jsonl", "https://h/other.jsonl"),
        ("-", "./-.gz"),
        ("s3://b/out.jsonl", "s3://c/out.jsonl"),
    ],
)
def test_two_outputs_are_staged_apart(
    one: str, other: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert staging_dir(one, TMP) != staging_dir(other, TMP)


def test_a_plain_output_is_held_in_the_system_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lock does not move with --output-tmp-dir: two runs on one file giving different
    ones still find each other."""
    monkeypatch.chdir(tmp_path)
    assert staged_path("out.jsonl", TMP) == "out.jsonl"
    assert lock_dir("out.jsonl", TMP) == lock_dir("./out.jsonl", "/elsewhere")
    assert lock_dir("out.jsonl.gz", TMP).parent == Path(TMP)


@pytest.mark.parametrize(
    ("uri", "pid", "staged", "line"),
    [
        (
            "-",
            41,
            True,
            "another run (pid 41) is writing standard output (-), staged in /d: wait for it to "
            "end, or give this run another --output-tmp-dir",
        ),
        (
            "s3://b/o.jsonl",
            None,
            True,
            "another run is writing s3://b/o.jsonl, staged in /d: wait for it to end, or give "
            "this run another --output-tmp-dir",
        ),
        ("out.jsonl", 7, False, "another run (pid 7) is writing out.jsonl: wait for it to end"),
    ],
)
def test_the_line_that_refuses_a_second_run(
    uri: str, pid: int | None, staged: bool, line: str
) -> None:
    assert busy_line(uri, "/d", pid, staged) == line
