"""S3's rules for a bucket's name, as `batch -o` and `transform` refuse one before any work."""

import pytest

from vllm_sagemaker.deploy.base.storage import bucket_problem


@pytest.mark.parametrize(
    ("bucket", "refused"),
    [
        ("my-bucket", False),
        ("a.b-c", False),
        ("abc", False),
        ("a" * 63, False),
        ("ab", True),
        ("a" * 64, True),
        ("My_Bucket", True),
        ("-abc", True),
        ("abc-", True),
        ("a..b", True),
        ("a.-b", True),
        ("a-.b", True),
        ("10.0.0.1", True),
        ("", True),
    ],
)
def test_what_s3_takes_as_a_bucket_name(bucket: str, refused: bool) -> None:
    problem = bucket_problem(bucket)
    assert (problem is not None) is refused
    if refused:
        assert problem == (
            f"{bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, dots and "
            "hyphens, starting and ending with a letter or digit, not an IP address)"
        )
