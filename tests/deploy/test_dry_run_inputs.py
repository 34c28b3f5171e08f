"""A dry run whose input's bucket does not exist fails as the real run would (exit status 1, one
line naming it), as an empty prefix does; it writes nothing. Against moto."""

import pytest

from tests.deploy.deploying import model_options
from tests.deploy.recording import run, state

MISSING = "s3://rec-no-such-bucket"


@pytest.mark.parametrize(
    "command",
    [
        (
            "transform",
            *model_options(
                "rec-dry-missing",
                "ml.g4dn.xlarge",
                input=f"{MISSING}/in/",
                output=f"{MISSING}/out/",
            ),
        ),
        (
            "batch",
            *model_options(
                "rec-dry-missing",
                "ml.g4dn.xlarge",
                input_file=f"{MISSING}/in/requests.jsonl",
                output_file=f"{MISSING}/out/output.jsonl",
                work_prefix=f"{MISSING}/work/",
            ),
        ),
    ],
)
def test_a_dry_run_of_a_missing_input_bucket_exits_1(
    role: str, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    before = state()
    status, out, err = run(capsys, "deploy", *command, "--dry-run")
    assert (status, out) == (1, ""), err
    assert "Traceback" not in err and len(err.strip().splitlines()) >= 1
    assert "rec-no-such-bucket" in err.splitlines()[-1], err
    assert state() == before
