"""SM_VLLM_* names are checked against vLLM's own options (the table in
`core/vllm_options.py`), by `serve` before it starts vLLM and by `deploy --env`, with the
nearest option as a suggestion."""

import pytest

from vllm_sagemaker.container import env_args, serve
from vllm_sagemaker.core import sm_vllm
from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.vllm_options import LONG_OPTIONS, SHORT_OPTIONS
from vllm_sagemaker.deploy.kit import checks

NO_OPTION = "vLLM 0.32.0 has no option"


@pytest.mark.parametrize(
    ("variable", "problem"),
    [
        ("SM_VLLM_MAX_MODEL_LEN", None),
        ("SM_VLLM_ENFORCE_EAGER", None),
        ("SM_VLLM_NO_ENABLE_PREFIX_CACHING", None),
        ("SM_VLLM_TENSOR_PARALLEL_SIZE", None),
        # Ours: the contract's (never flags) and the API key (`--api-key`, or vLLM's variable).
        ("SM_VLLM_MODEL", None),
        ("SM_VLLM_PORT", None),
        ("SM_VLLM_HOST", None),
        ("SM_VLLM_API_KEY", None),
        # Not SM_VLLM_<NAME>: left alone.
        ("SM_VLLM_", None),
        ("VLLM_MAX_MODLE_LEN", None),
        ("HF_TOKEN", None),
        (
            "SM_VLLM_MAX_MODLE_LEN",
            f"SM_VLLM_MAX_MODLE_LEN: {NO_OPTION} --max-modle-len; "
            "did you mean SM_VLLM_MAX_MODEL_LEN (--max-model-len)?",
        ),
        (
            "SM_VLLM_GPU_MEMORY_UTILISATION",
            f"SM_VLLM_GPU_MEMORY_UTILISATION: {NO_OPTION} --gpu-memory-utilisation; "
            "did you mean SM_VLLM_GPU_MEMORY_UTILIZATION (--gpu-memory-utilization)?",
        ),
        (
            "SM_VLLM_CUDA_GRAPH_SIZES",
            f"SM_VLLM_CUDA_GRAPH_SIZES: {NO_OPTION} --cuda-graph-sizes; "
            "did you mean SM_VLLM_CUDAGRAPH_CAPTURE_SIZES (--cudagraph-capture-sizes)?",
        ),
        # A short option's name: its long option.
        (
            "SM_VLLM_TP",
            f"SM_VLLM_TP: {NO_OPTION} --tp; "
            "did you mean SM_VLLM_TENSOR_PARALLEL_SIZE (--tensor-parallel-size)?",
        ),
        (
            "SM_VLLM_XYZZY",
            f"SM_VLLM_XYZZY: {NO_OPTION} --xyzzy, nor one close to it "
            "(`vllm serve --help` lists them)",
        ),
    ],
)
def test_unknown_flag(variable: str, problem: str | None) -> None:
    assert sm_vllm.unknown_flag(variable) == problem


def test_every_unknown_name_is_named_in_one_line() -> None:
    env = {"SM_VLLM_ENFORCE_EAGR": "true", "SM_VLLM_MAX_NUM_SEQS": "8", "SM_VLLM_XYZZY": "1"}
    with pytest.raises(ConfigError) as refused:
        sm_vllm.flags(env)
    assert str(refused.value) == "; ".join(
        [
            f"SM_VLLM_ENFORCE_EAGR: {NO_OPTION} --enforce-eagr; did you mean "
            "SM_VLLM_ENFORCE_EAGER (--enforce-eager)?",
            f"SM_VLLM_XYZZY: {NO_OPTION} --xyzzy, nor one close to it "
            "(`vllm serve --help` lists them)",
        ]
    )


def test_a_value_of_false_does_not_hide_a_misspelled_name() -> None:
    """`false` leaves the flag out, but the name is still a mistake the user meant something by."""
    with pytest.raises(ConfigError, match=r"^SM_VLLM_ENABLE_PREFIX_CACHIN: "):
        sm_vllm.flags({"SM_VLLM_ENABLE_PREFIX_CACHIN": "false"})


def test_the_flags_are_those_env_args_gives_vllm() -> None:
    """One mapping: the options checked are the ones `serve` puts on vLLM's command line."""
    env = {
        "SM_VLLM_MAX_MODEL_LEN": "4096",
        "SM_VLLM_ENFORCE_EAGER": "true",
        "SM_VLLM_MODEL": "m",
        "HF_TOKEN": "t",
    }
    assert sm_vllm.flags(env) == ["--enforce-eager", "--max-model-len"]
    given = [arg for arg in env_args.sm_vllm_flags(env) if arg.startswith("--")]
    assert sorted(given) == sm_vllm.flags(env)


def test_the_table_maps_back_and_forth() -> None:
    """Every option has a variable that names it, and each short option a long one."""
    assert all(sm_vllm.flag_name(sm_vllm.variable_name(flag)) == flag for flag in LONG_OPTIONS)
    assert set(SHORT_OPTIONS.values()) <= LONG_OPTIONS


def test_serve_and_deploy_refuse_a_misspelled_name_alike(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    problem = sm_vllm.unknown_flag("SM_VLLM_MAX_MODLE_LEN")
    monkeypatch.setenv("SM_VLLM_MODEL", "some/model")
    monkeypatch.setenv("SM_VLLM_MAX_MODLE_LEN", "8192")
    assert serve.run([], dry_run=True) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"serve: {problem}\n")
    found = checks.env_problem(["SM_VLLM_MAX_MODLE_LEN=8192"])
    assert found == f"--env: the container's serve would refuse it: {problem}"
