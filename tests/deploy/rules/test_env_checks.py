"""`deploy --env` refuses exactly what the container's `serve` would refuse, and checks
handler specs by form only (the customer's files are out of the client's reach)."""

import pytest

from vllm_sagemaker.container import serve
from vllm_sagemaker.core.environment import environment_problems
from vllm_sagemaker.deploy.kit import checks


@pytest.mark.parametrize(
    ("pairs", "problem"),
    [
        ([], None),
        (["SM_VLLM_MAX_MODEL_LEN=4096", "SM_VLLM_ENFORCE_EAGER=true"], None),
        (["SM_VLLM_API_KEY=secret", "HF_TOKEN=a=b"], None),
        (["PROCESS_AUTO_RECOVERY=false"], None),
        (["CUSTOM_FASTAPI_PING_HANDLER=model.py:ping"], None),
        (["NOVALUE"], "--env 'NOVALUE': give KEY=VALUE"),
        (["=x"], "give KEY=VALUE"),
        (["MY-VAR=1"], "give KEY=VALUE"),
        (["BIG=" + "x" * 1025], "--env BIG: 1025 characters"),
        (["PROCESS_AUTO_RECOVERY=maybe"], "PROCESS_AUTO_RECOVERY='maybe' is not a yes/no value"),
        (["SM_VLLM_API_KEY=true"], "SM_VLLM_API_KEY='true' holds no API key"),
        (["PROCESS_MAX_START_RETRIES=101"], "PROCESS_MAX_START_RETRIES must be a whole number"),
        (["SAGEMAKER_BIND_TO_PORT=http"], "SAGEMAKER_BIND_TO_PORT must be a TCP port"),
        (["SM_NUM_GPUS=all"], "SM_NUM_GPUS must be a whole number > 0"),
        (["STANDARD_AUTO_INSTALL_REQ=y"], "STANDARD_AUTO_INSTALL_REQ='y' is not a yes/no"),
        (["SAGEMAKER_MAX_PAYLOAD_IN_MB=0"], "SAGEMAKER_MAX_PAYLOAD_IN_MB must be a whole number"),
        (["CUSTOM_FASTAPI_PING_HANDLER=foo"], "names no function"),
        (
            ["SM_VLLM_MAX_MODLE_LEN=8192"],
            "--env: the container's serve would refuse it: SM_VLLM_MAX_MODLE_LEN: vLLM 0.32.0 has "
            "no option --max-modle-len; did you mean SM_VLLM_MAX_MODEL_LEN (--max-model-len)?",
        ),
        (["SM_VLLM_TP=2"], "did you mean SM_VLLM_TENSOR_PARALLEL_SIZE (--tensor-parallel-size)?"),
        (["SM_VLLM_MAX_MODEL_LEN=32k", "SM_VLLM_GPU_MEMORY_UTILIZATION=0.85"], None),
        (["SM_VLLM_MAX_MODEL_LEN=auto", "SM_VLLM_KV_CACHE_MEMORY_BYTES=8G"], None),
        (["SM_VLLM_MAX_MODEL_LEN=abc"], "SM_VLLM_MAX_MODEL_LEN='abc': vLLM's --max-model-len"),
        (["SM_VLLM_MAX_NUM_SEQS=1.5"], "SM_VLLM_MAX_NUM_SEQS='1.5': vLLM's --max-num-seqs takes"),
        (["SM_VLLM_GPU_MEMORY_UTILIZATION=most"], "--gpu-memory-utilization takes a number"),
        (["sm_vllm_max_model_len=8192"], "--env sm_vllm_max_model_len: the container's variables"),
        (["Sm_Vllm_Enforce_Eager=1"], "serve reads only SM_VLLM_* in upper case: give SM_VLLM_"),
    ],
)
def test_env(pairs: list[str], problem: str | None) -> None:
    found = checks.env_problem(pairs)
    if problem is None:
        assert found is None
        return
    assert found is not None and problem in found, found
    assert "\n" not in found


@pytest.mark.parametrize(
    "variables",
    [
        {"PROCESS_AUTO_RECOVERY": "maybe"},
        {"SM_VLLM_API_KEY": "true"},
        {"SM_NUM_GPUS": "0"},
        {"SAGEMAKER_BIND_TO_PORT": "70000"},
        {"SAGEMAKER_STOP_TIMEOUT_SECONDS": "-1", "SAGEMAKER_BATCH": "2"},
        {"SM_VLLM_MAX_MODLE_LEN": "8192", "SM_VLLM_ENFORCE_EAGR": "true"},
    ],
)
def test_deploy_refuses_what_serve_refuses(
    variables: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One rule: `serve` stops on exactly the problems `deploy --env` names."""
    monkeypatch.setenv("SM_VLLM_MODEL", "some/model")
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    assert serve.run([], dry_run=True) == 2
    (line,) = capsys.readouterr().err.splitlines()
    problems = environment_problems(variables, None)
    assert problems and line == "serve: " + "; ".join(problems)
    found = checks.env_problem([f"{k}={v}" for k, v in variables.items()])
    assert found == "--env: the container's serve would refuse it: " + "; ".join(problems)


def test_the_client_checks_handler_specs_by_form_only() -> None:
    """The customer's files are in the model, out of the client's reach."""
    spec = {"CUSTOM_FASTAPI_PING_HANDLER": "model.py:ping"}
    assert environment_problems(spec, None) == []
    assert "there is no file" in environment_problems(spec, lambda path: None)[0]
