"""`vllm-sagemaker --help` loads no boto3: it builds every parser, and boto3 loads only when a
command runs."""

import sys

import pytest

from tests.support import processes

IMPORTS_BOTO3 = "import sys; {}; print('boto3' in sys.modules or 'botocore' in sys.modules)"


@pytest.mark.parametrize(
    "statement",
    [
        "import argparse; from vllm_sagemaker.deploy.kit import cli; "
        "cli.add_arguments(argparse.ArgumentParser())",
        "from vllm_sagemaker.container import cli; cli.build_parser()",
    ],
)
def test_help_loads_no_boto3(statement: str) -> None:
    """`vllm-sagemaker --help` builds every parser; boto3 loads only when a command runs."""
    done = processes.run([sys.executable, "-c", IMPORTS_BOTO3.format(statement)], text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
