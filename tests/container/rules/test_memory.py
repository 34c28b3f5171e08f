"""The KV cache that fits the container's memory, and the line of a model that does not
(container/memory.py), as a table of cases."""

import pytest

from vllm_sagemaker.container import memory, restarts
from vllm_sagemaker.container.memory import GIB, MIB, Model

# all-MiniLM-L6-v2 (the suite's embedder) and the suite's tiny chat model, as their files say.
EMBEDDER = Model(weights_bytes=86 * MIB, kv_bytes_per_token=18432, max_model_len=512)
CHAT = Model(weights_bytes=2 * MIB, kv_bytes_per_token=2048, max_model_len=4096)
# A 1.3B chat model in bf16 with a 32k context.
LARGE = Model(
    weights_bytes=2500 * MIB, kv_bytes_per_token=2 * 28 * 8 * 128 * 2, max_model_len=32768
)


KV = "--kv-cache-memory-bytes"


@pytest.mark.parametrize(
    ("env", "args", "gpus", "cap_mib", "found", "kv_args", "kv_env", "said"),
    [
        # No cap (an instance): a quarter of the memory free in whole GiB, as before.
        ({}, [], 0, None, EMBEDDER, [], {"VLLM_CPU_KVCACHE_SPACE": "6"}, False),
        ({"VLLM_CPU_KVCACHE_SPACE": "3"}, [], 0, None, EMBEDDER, [], {}, False),
        ({}, [KV, "1G"], 0, None, EMBEDDER, [], {}, False),
        # Capped (Serverless Inference's sizes): a quarter of the cap, in bytes.
        ({}, [], 0, 2048, EMBEDDER, [KV, str(512 * MIB)], {}, True),
        ({}, [], 0, 6144, CHAT, [KV, str(1536 * MIB)], {}, True),
        # ... at most what is left beside the weights, vLLM's processes and the headroom.
        (
            {},
            [],
            0,
            6144,
            Model(3500 * MIB, LARGE.kv_bytes_per_token, 8192),
            [KV, str(928 * MIB)],
            {},
            True,
        ),
        # A KV cache the user sized that fits: kept, in vLLM's spellings of a size.
        ({}, [KV, str(256 * MIB)], 0, 2048, EMBEDDER, [], {}, True),
        ({}, [KV, "256M"], 0, 2048, EMBEDDER, [], {}, True),
        # ... or one vLLM will refuse itself: left to vLLM, never a second flag.
        ({}, [KV, "lots"], 0, 2048, EMBEDDER, [], {}, False),
        ({"VLLM_CPU_KVCACHE_SPACE": "many"}, [], 0, 2048, EMBEDDER, [], {}, False),
        # GPUs: nothing.
        ({}, [], 1, 2048, EMBEDDER, [], {}, False),
    ],
)
def test_the_kv_cache_fits(
    env: dict[str, str],
    args: list[str],
    gpus: int,
    cap_mib: int | None,
    found: Model,
    kv_args: list[str],
    kv_env: dict[str, str],
    said: bool,
) -> None:
    cap = cap_mib * MIB if cap_mib else None
    sized = memory.size(env, args, gpus, cap, 24 * GIB, found)
    assert (sized.args, sized.env, sized.problems) == (kv_args, kv_env, [])
    assert len(sized.notes) == said


@pytest.mark.parametrize(
    ("env", "args", "cap_mib", "found", "words"),
    [
        # Too small for vLLM's processes: the size that works is named.
        (
            {},
            [],
            1024,
            EMBEDDER,
            [
                "does not fit in the container's 1,024 MiB",
                "needs about 1,330 MiB",
                "MemorySizeInMB 2048 or more",
            ],
        ),
        # Larger than Serverless Inference can give: an instance, or a shorter context.
        (
            {},
            [],
            6144,
            Model(4000 * MIB, 2 * 28 * 8 * 128 * 2, 32768),
            [
                "more than Serverless Inference's 6144 MB: an instance",
                "SM_VLLM_MAX_MODEL_LEN=",
            ],
        ),
        (
            {},
            [],
            6144,
            LARGE,
            ["one sequence of 32,768 tokens (3,584 MiB)", "SM_VLLM_MAX_MODEL_LEN=17642"],
        ),
        # The user's KV cache does not fit: named, with the variables that size it.
        (
            {"VLLM_CPU_KVCACHE_SPACE": "3"},
            [],
            2048,
            EMBEDDER,
            ["the KV cache asked for 3,072 MiB", "a smaller KV cache (VLLM_CPU_KVCACHE_SPACE"],
        ),
    ],
)
def test_a_model_that_does_not_fit_is_one_line(
    env: dict[str, str], args: list[str], cap_mib: int, found: Model, words: list[str]
) -> None:
    sized = memory.size(env, args, 0, cap_mib * MIB, 24 * GIB, found)
    (line,) = sized.problems
    assert "\n" not in line and not sized.args
    for word in words:
        assert word in line, line


def test_a_context_given_on_the_command_line_wins_over_the_config() -> None:
    config = {
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "hidden_size": 2048,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    }
    assert memory.model(config, 5, []) == Model(5, 2 * 28 * 8 * 128 * 2, 32768)
    assert memory.model(config, 5, ["--max-model-len", "4096", "--dtype", "float32"]) == Model(
        5, 2 * 28 * 8 * 128 * 4, 4096
    )
    assert memory.model(config, 5, ["--max-model-len", "8k"]).max_model_len == 8000
    nested = {"architectures": ["X"], "text_config": config}
    assert memory.model(nested, 0, []).kv_bytes_per_token == 2 * 28 * 8 * 128 * 2
    assert memory.model({}, 0, []) == Model()


SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
INDEX = {"model.safetensors.index.json": SHARDS}


@pytest.mark.parametrize(
    ("files", "load_format", "indexes", "from_hub", "loaded"),
    [
        # bge-base-en-v1.5 and all-MiniLM-L6-v2 as the Hub holds them: the safetensors once,
        # not the .bin beside them, nor the ONNX and OpenVINO copies in their folders.
        (
            [
                "config.json",
                "model.safetensors",
                "pytorch_model.bin",
                "onnx/model.onnx",
                "openvino/openvino_model.bin",
                "1_Pooling/config.json",
            ],
            "auto",
            {},
            True,
            ["model.safetensors"],
        ),
        # Llama-3.2-1B: Meta's original checkpoint in its folder is not loaded.
        (
            ["model.safetensors", "original/consolidated.00.pth"],
            "auto",
            {},
            True,
            ["model.safetensors"],
        ),
        # No safetensors: the .bin, never a training checkpoint; else the .pt.
        (
            ["pytorch_model.bin", "training_args.bin", "tokenizer.json"],
            "auto",
            {},
            False,
            ["pytorch_model.bin"],
        ),
        (["model.pt", "optimizer.pt", "scheduler.pt"], "auto", {}, False, ["model.pt"]),
        # Sharded safetensors: the files the index names, not a whole copy beside them.
        (
            [*SHARDS, "model.safetensors", "model.safetensors.index.json"],
            "auto",
            INDEX,
            False,
            SHARDS,
        ),
        # Mistral's own format wins under "auto": the consolidated file, not the shards.
        (
            ["consolidated.safetensors", *SHARDS, "model.safetensors.index.json", "params.json"],
            "auto",
            INDEX,
            True,
            ["consolidated.safetensors"],
        ),
        # ... unless vLLM is told the Hugging Face format.
        (["consolidated.safetensors", *SHARDS], "hf", INDEX, True, SHARDS),
        # The streamer reads every safetensors at an S3 prefix (its index unread); from the
        # Hub, only the indexed ones are downloaded.
        (
            [*SHARDS, "model.safetensors", "pytorch_model.bin"],
            "runai_streamer",
            INDEX,
            False,
            [*SHARDS, "model.safetensors"],
        ),
        ([*SHARDS, "model.safetensors"], "runai_streamer", INDEX, True, SHARDS),
        (["pytorch_model.bin"], "runai_streamer", {}, False, []),
        # A load format names which files: .pt alone, safetensors alone.
        (["model.safetensors", "model.pt"], "pt", {}, False, ["model.pt"]),
        (["pytorch_model.bin", "model.pt"], "safetensors", {}, False, []),
        # Formats whose memory is not these files: unknown here.
        (["model.safetensors"], "dummy", {}, False, None),
        (["model.safetensors"], "bitsandbytes", {}, False, None),
        (["model-q4.gguf"], "gguf", {}, False, None),
    ],
)
def test_each_weight_counts_once_as_vllm_loads_it(
    files: list[str],
    load_format: str,
    indexes: dict[str, list[str]],
    from_hub: bool,
    loaded: list[str] | None,
) -> None:
    assert memory.weight_files(files, load_format, indexes, from_hub) == loaded


@pytest.mark.parametrize(
    ("before", "after", "limit", "line"),
    [
        (0, 0, 2 * GIB, None),
        (1, 1, 2 * GIB, None),
        (
            0,
            1,
            2 * GIB,
            "(1 kill(s) in the container's cgroup): the model and its load do not "
            "fit in its limit of 2,048 MiB",
        ),
        (
            2,
            4,
            None,
            "(2 kill(s) in the container's cgroup): the model and its load do not fit "
            "in its memory",
        ),
    ],
)
def test_a_kernel_oom_kill_is_named(
    before: int, after: int, limit: int | None, line: str | None
) -> None:
    said = restarts.out_of_memory(before, after, limit)
    if line is None:
        assert said is None
    else:
        assert said is not None and said.startswith("the kernel's OOM killer killed a process")
        assert line in said
