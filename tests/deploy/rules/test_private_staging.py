"""What makes the directory `batch` stages a compressed output in private: a directory of the
run's own user, open to no one else, and not a symbolic link."""

import os
import stat

import pytest

from vllm_sagemaker.deploy.batch.staging import why_not_private


def stat_of(kind: int, mode: int, uid: int) -> os.stat_result:
    return os.stat_result((kind | mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("found", "problem"),
    [
        (stat_of(stat.S_IFDIR, 0o700, 1000), None),
        (stat_of(stat.S_IFDIR, 0o750, 1000), "is open to other users (mode 750)"),
        (stat_of(stat.S_IFDIR, 0o701, 1000), "is open to other users (mode 701)"),
        (stat_of(stat.S_IFDIR, 0o700, 0), "belongs to another user (uid 0)"),
        (stat_of(stat.S_IFLNK, 0o777, 1000), "is a symbolic link"),
        (stat_of(stat.S_IFREG, 0o600, 1000), "is not a directory"),
    ],
)
def test_what_makes_a_staging_directory_private(found: os.stat_result, problem: str) -> None:
    assert why_not_private(found, 1000) == problem
