"""Kept for the callers of its old name: `error_answers.missing` is the rule."""

from vllm_sagemaker.deploy.base.error_answers import missing as missing
