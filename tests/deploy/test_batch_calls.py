"""`deploy batch` writes only what it says: a fleet's and a cancel's dry runs write nothing,
and a model of the batch's name is reused when it is the same, refused when it differs. Every
botocore call recorded against moto."""

import json
from pathlib import Path

import pytest

from tests.deploy.deploying import model_options
from tests.deploy.fleets import fleet_args
from tests.deploy.recording import dry_then_real, identity, recorded, run, state, writes


def test_batch_dry_runs_write_nothing(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet's dry run and a cancel's dry run; the real cancel writes what was printed."""
    arguments = fleet_args("rec-fleet", tmp_path)
    before = state()
    with recorded() as calls:
        status, out, err = run(capsys, "deploy", "batch", *arguments, "--dry-run")
    assert status == 0, err
    assert writes(calls) == [] and state() == before
    planned = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    assert [op for _, op, _ in planned] == (
        ["PutObject"] * 4 + ["CreateModel"] + ["CreateTransformJob"] * 3 + ["PutObject"] * 2
    )
    cancel = ("deploy", "batch", "--cancel", "--name", "x", "--work-prefix", "s3://rec-fleet/work/")
    assert dry_then_real(capsys, *cancel) == [("s3", "PutObject", "work/cancel")]
    status, out, err = run(capsys, "deploy", "batch", *arguments, "--dry-run")
    assert status == 0, err
    planned = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    assert planned[4:6] == [
        ("s3", "DeleteObject", "work/cancel"),
        ("sagemaker", "CreateModel", "rec-fleet"),
    ]


def test_batch_refuses_another_model_of_its_name(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deploy batch --name N` where N names an endpoint's model with another model id: one line
    naming the difference and --name; nothing written."""
    endpoint = model_options("rec-shared", "ml.g4dn.xlarge")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *endpoint)[0] == 0
    arguments = fleet_args("rec-shared", tmp_path)
    arguments[arguments.index("--model-id") + 1] = "org/other"
    before = state()
    for dry in ([], ["--dry-run"]):
        status, out, err = run(capsys, "deploy", "batch", *arguments, *dry)
        assert status == 1 and out == ""
        assert err.splitlines()[-1].startswith(
            "deploy: a model named rec-shared exists and differs"
        )
        assert "org/other" in err and "--name" in err
    assert state() == before


def test_batch_reuses_the_same_model(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An endpoint's model that is the model `deploy batch` would create is used, not made again."""
    endpoint = model_options("rec-same", "ml.g4dn.xlarge")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *endpoint)[0] == 0
    status, out, err = run(
        capsys, "deploy", "batch", *fleet_args("rec-same", tmp_path), "--dry-run"
    )
    assert status == 0, err
    assert "model rec-same exists as asked" in err
    assert "CreateModel" not in [c["operation"] for c in json.loads(out)]
