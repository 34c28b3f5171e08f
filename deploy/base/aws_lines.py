"""Kept for the callers of its old names: `errors` and `error_answers` translate AWS's errors."""

from vllm_sagemaker.deploy.base.error_answers import _NOT_AWS as _NOT_AWS
from vllm_sagemaker.deploy.base.error_answers import aws_answer as aws_answer
from vllm_sagemaker.deploy.base.error_answers import no_endpoint as no_endpoint
from vllm_sagemaker.deploy.base.errors import explain

aws_line = explain
