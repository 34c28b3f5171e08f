"""The env -> argv rules, as a table of cases."""

from pathlib import Path

import pytest

from vllm_sagemaker.container import cpu_libraries, env_args, hardware, serve
from vllm_sagemaker.core.config import api_keys
from vllm_sagemaker.core.env import ConfigError

LIVE_FIRST = env_args.LIVE_FIRST_SCHEDULER


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SM_VLLM_ENABLE_PREFIX_CACHING": "true"}, ["--enable-prefix-caching"]),
        ({"SM_VLLM_ENABLE_PREFIX_CACHING": "TRUE"}, ["--enable-prefix-caching"]),
        ({"SM_VLLM_DISABLE_LOG_STATS": "false"}, []),
        ({"SM_VLLM_DISABLE_LOG_STATS": "False"}, []),
        ({"SM_VLLM_TRUST_REMOTE_CODE": ""}, ["--trust-remote-code"]),
        ({"SM_VLLM_MAX_MODEL_LEN": "4096"}, ["--max-model-len", "4096"]),
        ({"SM_VLLM_SERVED_MODEL_NAME": "my model"}, ["--served-model-name", "my model"]),
        ({"SM_VLLM_SERVED_MODEL_NAME": '["a", "b c"]'}, ["--served-model-name", "a", "b c"]),
        (
            {"SM_VLLM_CUDAGRAPH_CAPTURE_SIZES": "[1, 2, 4]"},
            ["--cudagraph-capture-sizes", "1", "2", "4"],
        ),
        ({"SM_VLLM_X": "[not json"}, ["--x", "[not json"]),
        (
            {"SM_VLLM_SPECULATIVE_CONFIG": '{"method": "ngram"}'},
            ["--speculative-config", '{"method": "ngram"}'],
        ),
        ({"SM_VLLM_B": "1", "SM_VLLM_A": "2"}, ["--a", "2", "--b", "1"]),
        ({"SM_VLLM_MODEL": "m", "SM_VLLM_PORT": "9000", "SM_VLLM_HOST": "1.2.3.4"}, []),
        ({"SM_VLLM_": "x", "VLLM_FOO": "1", "HF_MODEL_ID": "m"}, []),
    ],
)
def test_sm_vllm_flags(env: dict[str, str], expected: list[str]) -> None:
    assert env_args.sm_vllm_flags(env) == expected


def vllm_keys(args: list[str], env: dict[str, str]) -> tuple[str, ...]:
    """The keys vLLM 0.32 checks (entrypoints/serve/middleware/register.py): `--api-key`'s,
    else VLLM_API_KEY's."""
    given = args[args.index("--api-key") + 1 :] if "--api-key" in args else []
    return tuple(key for key in (given or [env.get("VLLM_API_KEY")]) if key)


@pytest.mark.parametrize(
    ("env", "keys", "args", "key_env"),
    [
        ({}, (), [], {}),
        # The user's own VLLM_API_KEY: vLLM and the handler both read it where it is.
        ({"VLLM_API_KEY": "v"}, ("v",), [], {}),
        # One key: in vLLM's environment, never on its command line (`ps` shows that to all).
        ({"SM_VLLM_API_KEY": "k"}, ("k",), [], {"VLLM_API_KEY": "k"}),
        ({"SM_VLLM_API_KEY": "k", "VLLM_API_KEY": "v"}, ("k",), [], {"VLLM_API_KEY": "k"}),
        ({"SM_VLLM_API_KEY": " k "}, ("k",), [], {"VLLM_API_KEY": "k"}),
        ({"SM_VLLM_API_KEY": '["k"]'}, ("k",), [], {"VLLM_API_KEY": "k"}),
        # Several keys: on the command line, the one place vLLM takes more than one.
        ({"SM_VLLM_API_KEY": '["a", " b "]'}, ("a", "b"), ["--api-key", "a", "b"], {}),
        (
            {"SM_VLLM_API_KEY": '["a", "b"]', "VLLM_API_KEY": "v"},
            ("a", "b"),
            ["--api-key", "a", "b"],
            {},
        ),
        ({"SM_VLLM_API_KEY": '["a", "", " "]'}, ("a",), [], {"VLLM_API_KEY": "a"}),
        # A key, not a flag, when it is spelt out in an array.
        ({"SM_VLLM_API_KEY": '["true"]'}, ("true",), [], {"VLLM_API_KEY": "true"}),
        # Neither vLLM nor the handler splits on commas: this is one (poor) key.
        ({"SM_VLLM_API_KEY": ","}, (",",), [], {"VLLM_API_KEY": ","}),
    ],
)
def test_vllm_and_the_handler_check_the_same_api_keys(
    env: dict[str, str],
    keys: tuple[str, ...],
    args: list[str],
    key_env: dict[str, str],
) -> None:
    """The arguments and environment `serve` gives vLLM, and what vLLM and the handler (in
    vLLM's process, so in that environment) then check."""
    assert env_args.api_key_placement(env) == (args, key_env)
    given = env_args.sm_vllm_flags(env)
    assert given == args
    added = env_args.platform_env(env, ["--model", "/m", *given])
    assert {k: v for k, v in added.items() if k == "VLLM_API_KEY"} == key_env
    vllm_env = {**env, **added}
    assert api_keys(env) == api_keys(vllm_env) == vllm_keys(given, vllm_env) == keys


@pytest.mark.parametrize(
    "value", ["true", "TRUE", "false", "False", "", "  ", "[]", '[""]', '[" "]']
)
def test_an_api_key_variable_that_holds_no_key_stops_serve_before_vllm(
    value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"SM_VLLM_API_KEY": value}
    for rule in (api_keys, env_args.sm_vllm_flags):
        with pytest.raises(ConfigError, match=r"^SM_VLLM_API_KEY="):
            rule(env)
    monkeypatch.setenv("SM_VLLM_MODEL", "some/model")
    monkeypatch.setenv("SM_VLLM_API_KEY", value)
    assert serve.run([], dry_run=True) == 2
    out, err = capsys.readouterr()
    (message,) = err.splitlines()
    assert out == ""
    assert message == (
        f"serve: SM_VLLM_API_KEY={value!r} holds no API key: set it to the key clients send as "
        "'Authorization: Bearer <key>' (or a JSON array of keys), or leave it unset for a server "
        "that needs no key"
    )


@pytest.mark.parametrize(
    ("env", "entries", "expected"),
    [
        ({"SM_VLLM_MODEL": "org/m", "HF_MODEL_ID": "other"}, ["config.json"], "org/m"),
        ({"HF_MODEL_ID": "org/m"}, ["config.json"], "/opt/ml/model"),
        ({"HF_MODEL_ID": "org/m", "SAGEMAKER_MODEL_DIR": "/tmp/x"}, ["a"], "/tmp/x"),
        ({"HF_MODEL_ID": "org/m"}, [], "org/m"),
        ({"SM_VLLM_MODEL": "", "HF_MODEL_ID": "org/m"}, [], "org/m"),
    ],
)
def test_resolve_model(env: dict[str, str], entries: list[str], expected: str) -> None:
    assert env_args.resolve_model(env, entries) == expected


def test_no_model_names_every_source() -> None:
    with pytest.raises(ConfigError) as error:
        env_args.resolve_model({}, [])
    for source in ("SM_VLLM_MODEL", "/opt/ml/model", "HF_MODEL_ID"):
        assert source in str(error.value)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, 8080),
        ({"SAGEMAKER_BIND_TO_PORT": "9001"}, 9001),
        ({"SAGEMAKER_BIND_TO_PORT": ""}, 8080),
    ],
)
def test_port(env: dict[str, str], expected: int) -> None:
    assert env_args.port(env) == expected


@pytest.mark.parametrize("value", ["abc", "0", "70000", "-1"])
def test_bad_port(value: str) -> None:
    with pytest.raises(ConfigError, match="SAGEMAKER_BIND_TO_PORT"):
        env_args.port({"SAGEMAKER_BIND_TO_PORT": value})


@pytest.mark.parametrize(
    ("env", "gpus", "given", "expected"),
    [
        ({}, 0, [], []),
        ({}, 1, [], []),
        ({}, 4, [], ["--tensor-parallel-size", "4"]),
        ({"SM_NUM_GPUS": "2"}, 8, [], ["--tensor-parallel-size", "2"]),
        ({"SM_NUM_GPUS": "2"}, 8, ["--tensor-parallel-size", "8"], []),
        ({}, 4, ["-tp", "2"], []),
        ({}, 4, ["--tensor-parallel-size=2"], []),
    ],
)
def test_tensor_parallel(
    env: dict[str, str], gpus: int, given: list[str], expected: list[str]
) -> None:
    assert env_args.tensor_parallel_args(env, gpus, given) == expected


def test_bad_sm_num_gpus() -> None:
    with pytest.raises(ConfigError, match="SM_NUM_GPUS"):
        env_args.tensor_parallel_args({"SM_NUM_GPUS": "all"}, 0, [])


def test_server_args_acceptance_example() -> None:
    env = {
        "SM_VLLM_MODEL": "/m",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "2",
        "SM_VLLM_ENABLE_PREFIX_CACHING": "true",
        "SM_VLLM_DISABLE_LOG_STATS": "false",
        "SM_VLLM_SERVED_MODEL_NAME": "my model",
    }
    args = env_args.server_args(env, [], visible_gpus=8, extra=["--seed", "1"])
    assert args == [
        "--model",
        "/m",
        "--host",
        "0.0.0.0",
        "--port",
        "8080",
        "--enable-prefix-caching",
        "--served-model-name",
        "my model",
        "--tensor-parallel-size",
        "2",
        "--seed",
        "1",
        "--scheduling-policy",
        "priority",
        "--scheduler-cls",
        env_args.LIVE_FIRST_SCHEDULER,
        "--disable-access-log-for-endpoints",
        "/ping",
        "--middleware",
        "vllm_sagemaker.handler.middleware.SageMakerMiddleware",
    ]


def test_user_access_log_choice_wins() -> None:
    env = {"SM_VLLM_MODEL": "m", "SM_VLLM_DISABLE_ACCESS_LOG_FOR_ENDPOINTS": "/ping,/metrics"}
    args = env_args.server_args(env, [], 0)
    assert args.count("--disable-access-log-for-endpoints") == 1
    assert args[args.index("--disable-access-log-for-endpoints") + 1] == "/ping,/metrics"


# /dev of a container NVIDIA's toolkit gave GPUs 4 and 5 of an instance's eight (an inference
# component's share): their own device files, with the driver's, which are not GPUs.
GIVEN_4_5 = [
    "null",
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-caps",
    "nvidia4",
    "nvidia5",
]
ALL_8 = [f"nvidia{n}" for n in range(8)] + ["nvidiactl", "nvidia-uvm"]
UUIDS = "GPU-5a1d2f7e-0b3c-4d5e-8f9a-0b1c2d3e4f50,GPU-6b2e3f8f-1c4d-5e6f-9a0b-1c2d3e4f5061"


@pytest.mark.parametrize(
    ("env", "dev", "expected"),
    [
        ({}, ["null", "tty"], 0),
        ({}, ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"], 2),
        ({}, ALL_8, 8),
        # Whatever NVIDIA_VISIBLE_DEVICES said, the GPUs the toolkit gave are the devices seen
        # (the variable also holds `all` in CUDA's images, and host numbers).
        ({}, GIVEN_4_5, 2),
        ({"NVIDIA_VISIBLE_DEVICES": "4,5"}, GIVEN_4_5, 2),
        ({"NVIDIA_VISIBLE_DEVICES": UUIDS}, GIVEN_4_5, 2),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, GIVEN_4_5, 2),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, ["null", "nvidiactl", "nvidia-uvm"], 0),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, ["null"], 0),
        ({"NVIDIA_VISIBLE_DEVICES": ""}, ["null"], 0),
        # CUDA_VISIBLE_DEVICES narrows what is seen, numbered from 0 as CUDA numbers it.
        ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, ALL_8, 3),
        ({"CUDA_VISIBLE_DEVICES": "1"}, GIVEN_4_5, 1),
        ({"CUDA_VISIBLE_DEVICES": "0, 1"}, GIVEN_4_5, 2),
        ({"CUDA_VISIBLE_DEVICES": UUIDS}, GIVEN_4_5, 2),
        ({"CUDA_VISIBLE_DEVICES": "MIG-4f1e2d3c-0a1b-4c2d-9e8f-7a6b5c4d3e2f"}, ["nvidia0"], 1),
        # Host numbers are not the container's: GPU 4 is beyond the two seen.
        ({"CUDA_VISIBLE_DEVICES": "4,5"}, GIVEN_4_5, 0),
        # Up to the first GPU that is not there; -1 or nothing hides them all.
        ({"CUDA_VISIBLE_DEVICES": "0,2,1"}, GIVEN_4_5, 1),
        ({"CUDA_VISIBLE_DEVICES": "0,-1,1"}, ALL_8, 1),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, ALL_8, 0),
        ({"CUDA_VISIBLE_DEVICES": ""}, ["nvidia0"], 0),
        ({"CUDA_VISIBLE_DEVICES": "0,0"}, ALL_8, 0),
        # No device files: no GPU, whatever is named.
        ({"CUDA_VISIBLE_DEVICES": "0"}, ["null"], 0),
        ({"CUDA_VISIBLE_DEVICES": UUIDS}, ["null"], 0),
    ],
)
def test_visible_gpu_count(env: dict[str, str], dev: list[str], expected: int) -> None:
    assert hardware.visible_gpu_count(env, dev) == expected


@pytest.mark.parametrize(
    ("env", "dev", "expected"),
    [
        # An inference component given 2 of 8 GPUs runs on 2; on all 8, on 8.
        ({}, GIVEN_4_5, "2"),
        ({"NVIDIA_VISIBLE_DEVICES": UUIDS}, GIVEN_4_5, "2"),
        ({}, ALL_8, "8"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, ALL_8, "4"),
        # One GPU or none: vLLM's own (one GPU, or the CPU).
        ({"CUDA_VISIBLE_DEVICES": "1"}, GIVEN_4_5, None),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, ["nvidiactl"], None),
        # The user's size wins over the GPUs seen.
        ({"SM_VLLM_TENSOR_PARALLEL_SIZE": "1"}, GIVEN_4_5, "1"),
        ({"SM_VLLM_TENSOR_PARALLEL_SIZE": "4"}, ALL_8, "4"),
        ({"SM_NUM_GPUS": "1"}, ALL_8, "1"),
    ],
)
def test_tensor_parallelism_follows_the_gpus_the_container_sees(
    env: dict[str, str], dev: list[str], expected: str | None
) -> None:
    args = env_args.server_args(
        {"SM_VLLM_MODEL": "m", **env}, [], hardware.visible_gpu_count(env, dev)
    )
    assert args.count("--tensor-parallel-size") == (expected is not None)
    assert env_args.flag_value(args, "--tensor-parallel-size") == expected


IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@pytest.mark.parametrize(
    ("env", "gpus", "quota", "allowed", "expected"),
    [
        # No quota, or one at least the CPUs seen less vLLM's reserved one: vLLM's own binding.
        ({}, 0, None, [0, 1, 2, 3], {}),
        ({}, 0, 4.0, [0, 1, 2, 3], {}),
        ({}, 0, 1.0, [0, 1], {}),
        # Fewer CPUs than seen: one thread per whole CPU less one, at least one.
        ({}, 0, 1.0, [0, 1, 2, 3, 4, 5, 6, 7], {"VLLM_CPU_OMP_THREADS_BIND": "0"}),
        ({}, 0, 0.5, [4, 5, 6, 7], {"VLLM_CPU_OMP_THREADS_BIND": "4"}),
        ({}, 0, 3.5, [7, 6, 5, 4, 3, 2, 1, 0], {"VLLM_CPU_OMP_THREADS_BIND": "0,1"}),
        # The user's binding, or GPUs: nothing.
        ({"VLLM_CPU_OMP_THREADS_BIND": "nobind"}, 0, 1.0, list(range(8)), {}),
        ({}, 1, 1.0, list(range(8)), {}),
        # The worker in the engine core's process: vLLM binds nothing there and OpenMP starts a
        # thread per CPU seen, so the count (no CPU is left aside by vLLM).
        (IN_PROCESS, 0, 1.0, [0, 1], {"OMP_NUM_THREADS": "1"}),
        (IN_PROCESS, 0, 3.5, list(range(8)), {"OMP_NUM_THREADS": "2"}),
        (IN_PROCESS, 0, 2.0, [0], {}),
        (IN_PROCESS, 0, None, [0, 1], {}),
        (IN_PROCESS, 1, 1.0, [0, 1], {}),
        ({**IN_PROCESS, "OMP_NUM_THREADS": "2"}, 0, 1.0, [0, 1], {}),
        ({"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}, 0, 1.0, [0, 1], {}),
    ],
)
def test_omp_threads_follow_the_cpu_quota(
    env: dict[str, str],
    gpus: int,
    quota: float | None,
    allowed: list[int],
    expected: dict[str, str],
) -> None:
    added = hardware.omp_threads_env(env, gpus, quota, allowed)
    assert added == expected
    assert hardware.omp_thread_count(added) == (max(1, int(quota or 0) - 1) if added else None)


TC, IOMP = "/usr/lib/tc.so", "/venv/lib/libiomp5.so"
BOTH = cpu_libraries.Found(TC, IOMP, x86=True)


@pytest.mark.parametrize(
    ("env", "gpus", "found", "expected", "lacking"),
    [
        ({}, 0, BOTH, {"LD_PRELOAD": f"{TC}:{IOMP}"}, []),
        ({"LD_PRELOAD": "/mine.so"}, 0, BOTH, {"LD_PRELOAD": f"{TC}:{IOMP}:/mine.so"}, []),
        (
            {"LD_PRELOAD": "/x/libtcmalloc.so.4"},
            0,
            BOTH,
            {"LD_PRELOAD": f"{IOMP}:/x/libtcmalloc.so.4"},
            [],
        ),
        ({"LD_PRELOAD": "/a/libtcmalloc.so:/b/libiomp5.so"}, 0, BOTH, {}, []),
        ({}, 1, BOTH, {}, []),
        ({"SAGEMAKER_CPU_PRELOAD": "false"}, 0, BOTH, {}, []),
        ({}, 0, cpu_libraries.Found(None, IOMP, x86=True), {"LD_PRELOAD": IOMP}, ["tcmalloc"]),
        ({}, 0, cpu_libraries.Found(None, None, x86=True), {}, ["tcmalloc", "Intel OpenMP"]),
        ({}, 0, cpu_libraries.Found(TC, None, x86=False), {"LD_PRELOAD": TC}, []),
    ],
)
def test_cpu_engine_libraries(
    env: dict[str, str],
    gpus: int,
    found: cpu_libraries.Found,
    expected: dict[str, str],
    lacking: list[str],
) -> None:
    """vLLM's CPU guide: tcmalloc then Intel OpenMP (x86 only) before what the user preloads,
    never twice, not on GPUs or with the switch off; a line names each library not found."""
    added, lines = cpu_libraries.preload(env, gpus, found)
    assert added == expected
    assert [line.split(" not found")[0] for line in lines] == lacking
    assert all("SAGEMAKER_CPU_PRELOAD=false" in line for line in lines)


def test_cpu_engine_libraries_are_found_where_they_are_installed(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / cpu_libraries.IOMP).touch()
    (tmp_path / cpu_libraries.TCMALLOC).touch()
    found = cpu_libraries.find([str(tmp_path / "none"), str(tmp_path)], [str(tmp_path)])
    assert (found.tcmalloc, found.iomp) == (
        str(tmp_path / cpu_libraries.TCMALLOC),
        str(tmp_path / "lib" / cpu_libraries.IOMP),
    )
    assert cpu_libraries.find([str(tmp_path / "none")], []).tcmalloc is None


@pytest.mark.parametrize(
    ("env", "given", "expected"),
    [
        ({}, [], ["--scheduling-policy", "priority", "--scheduler-cls", LIVE_FIRST]),
        ({"SAGEMAKER_BATCH_YIELD": "false"}, [], ["--scheduling-policy", "priority"]),
        ({"SAGEMAKER_BATCH_API": "false"}, [], []),
        ({}, ["--scheduling-policy", "fcfs"], []),
        ({}, ["--scheduling-policy=fcfs"], []),
        ({}, ["--scheduling-policy", "priority"], ["--scheduler-cls", LIVE_FIRST]),
        ({}, ["--scheduler-cls", "my.Scheduler"], ["--scheduling-policy", "priority"]),
        (
            {"SAGEMAKER_BATCH_API": "false"},
            ["--scheduling-policy=priority"],
            ["--scheduler-cls", LIVE_FIRST],
        ),
    ],
)
def test_priority_scheduling_serves_batch_lines_last(
    env: dict[str, str], given: list[str], expected: list[str]
) -> None:
    assert env_args.scheduling_args(env, given) == expected


@pytest.mark.parametrize(
    ("args", "env", "priority"),
    [
        (["--scheduling-policy", "priority"], {}, "10"),
        (["--scheduling-policy", "priority"], {"SAGEMAKER_BATCH_PRIORITY": "3"}, None),
        (["--scheduling-policy", "fcfs"], {}, None),
        ([], {}, None),
    ],
)
def test_batch_priority_only_under_priority_scheduling(
    args: list[str], env: dict[str, str], priority: str | None
) -> None:
    added = env_args.platform_env(env, ["--model", "/m", *args])
    assert added.get("SAGEMAKER_BATCH_PRIORITY") == priority
