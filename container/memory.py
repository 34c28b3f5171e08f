"""How much memory the CPU engine's KV cache gets, and whether the model fits at all: pure rules
over the container's memory (its cgroup's cap, else what /proc/meminfo has free), the model's
files and vLLM's arguments.

vLLM's CPU engine allocates its KV cache up front (`VLLM_CPU_KVCACHE_SPACE` GiB, or
`--kv-cache-memory-bytes`). On a machine with no cap, `serve` gives it a quarter of the memory
free, in whole GiB. In a container with a cap (`docker run --memory`, SageMaker Serverless
Inference), the cap is a hard one: the kernel kills a process that passes it. There the KV cache
gets a quarter of the cap (more when one sequence of the model's context needs more), at most
what is left once vLLM's processes, the model's weights and a headroom for requests are counted;
and a model that cannot fit even one sequence of its context stops `serve` at once with one line
saying what it has, what it needs and the sizes that would work. The weights are the files
vLLM loads (`weight_files`), wherever they are: `serve` reads their sizes from the model's
directory, the Hugging Face Hub or the object store it streams them from.
"""

import fnmatch
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_sagemaker.container.env_args import flag_value
from vllm_sagemaker.core.config import SERVERLESS_MEMORY_SIZES_MB
from vllm_sagemaker.core.environment import readable_int

MIB = 1024**2
GIB = 1024**3
KV_CACHE_SHARE = 0.25
KV_CACHE_MAX_GIB = 64
KV_SPACE_VAR = "VLLM_CPU_KVCACHE_SPACE"
KV_BYTES_VAR = "SM_VLLM_KV_CACHE_MEMORY_BYTES"
KV_BYTES_FLAG = "--kv-cache-memory-bytes"
# What vLLM's two processes (API server and engine core, the model in the engine core's) hold
# beside the weights and the KV cache, measured in the CPU image (docs/serverless.md: peak
# memory.current less the weights and the KV cache, embedder and chat model alike).
VLLM_PROCESSES_BYTES = 1100 * MIB
# Left free for what requests use (activations, tokenizer, buffers): this share of the cap,
# at least HEADROOM_MIN_BYTES.
HEADROOM_SHARE = 0.1
HEADROOM_MIN_BYTES = 128 * MIB
# The KV cache a capped container gets is a multiple of this.
KV_STEP_BYTES = 16 * MIB
# The weight files vLLM 0.32 loads by `--load-format` (model_loader/default_loader.py,
# runai_streamer_loader.py): the patterns it tries in turn at the model's root, the first that
# matches a file winning, so a folder with both model.safetensors and pytorch_model.bin loads
# the safetensors alone. "auto" is "mistral" when a consolidated*.safetensors is there, else "hf".
WEIGHT_PATTERNS = {
    "hf": ("*.safetensors", "*.bin", "*.pt"),
    "safetensors": ("*.safetensors",),
    "fastsafetensors": ("*.safetensors",),
    "instanttensor": ("*.safetensors",),
    "mistral": ("consolidated*.safetensors",),
    "pt": ("*.pt",),
    "npcache": ("*.bin", "*.pt"),
    "runai_streamer": ("*.safetensors",),
}
MISTRAL = "consolidated*.safetensors"
STREAMER = "runai_streamer"
# Sharded safetensors: vLLM loads only the files the index's weight_map names (a consolidated
# file beside the shards is left out).
SAFETENSORS_INDEX = "model.safetensors.index.json"
MISTRAL_INDEX = "consolidated.safetensors.index.json"
INDEX_FILES = (SAFETENSORS_INDEX, MISTRAL_INDEX)
# Checkpoints of training that vLLM never loads (weight_utils.filter_files_not_needed_for_
# inference).
NOT_FOR_INFERENCE = (
    "training_args.bin",
    "optimizer.bin",
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
)
# Bytes of one value by dtype name (vLLM's and transformers' spellings).
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


@dataclass(frozen=True)
class Model:
    """What the model's files say of its memory: weights in bytes, KV cache bytes per token and
    the context length the engine will allow (0 where unknown)."""

    weights_bytes: int = 0
    kv_bytes_per_token: int = 0
    max_model_len: int = 0


@dataclass(frozen=True)
class Sizing:
    """What `serve` adds for memory: arguments, variables and lines for the log, and the
    problem that stops it (one line each)."""

    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def weight_files(
    files: Collection[str],
    load_format: str = "auto",
    indexes: Mapping[str, Collection[str]] | None = None,
    from_hub: bool = False,
) -> list[str] | None:
    """The files among a model's (paths from its root) that vLLM loads as its weights, each
    weight once: at the root, of the first of the load format's patterns that matches (the
    safetensors over a .bin or .pt of the same weights), those the index names when the
    safetensors are sharded (`indexes`: an index file present -> the files its weight_map
    names), no training checkpoints. The Run:ai streamer reads every safetensors at an object
    store's prefix or a directory, its index unread; from the Hub (`from_hub`) it downloads
    only the indexed ones. None for a load format whose weights are not these files (dummy,
    gguf, bitsandbytes, tensorizer, ...)."""
    if load_format == "auto":
        root = [name for name in files if "/" not in name]
        load_format = "mistral" if fnmatch.filter(root, MISTRAL) else "hf"
    patterns = WEIGHT_PATTERNS.get(load_format)
    if patterns is None:
        return None
    chosen: list[str] = []
    pattern = ""
    for pattern in patterns:
        chosen = sorted(n for n in files if "/" not in n and fnmatch.fnmatchcase(n, pattern))
        if chosen:
            break
    if not pattern.endswith(".safetensors"):
        return [n for n in chosen if not n.endswith(NOT_FOR_INFERENCE)]
    index = (indexes or {}).get(MISTRAL_INDEX if load_format == "mistral" else SAFETENSORS_INDEX)
    if index is None or (load_format == STREAMER and not from_hub):
        return chosen
    return [n for n in chosen if n in index]


def model(config: Mapping[str, Any], weights: int, args: Sequence[str]) -> Model:
    """The model's memory from its `config.json`, its weights' size and vLLM's arguments
    (`--max-model-len`, `--dtype`, `--kv-cache-dtype` win over the config)."""
    text = config.get("text_config")
    if isinstance(text, Mapping):
        config = {**config, **text}
    layers = _int(config.get("num_hidden_layers"))
    heads = _int(config.get("num_attention_heads"))
    kv_heads = _int(config.get("num_key_value_heads")) or heads
    head_dim = _int(config.get("head_dim")) or (
        _int(config.get("hidden_size")) // heads if heads else 0
    )
    dtype = flag_value(args, "--kv-cache-dtype") or "auto"
    if dtype == "auto":
        dtype = flag_value(args, "--dtype") or "auto"
    if dtype == "auto":
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    per_value = DTYPE_BYTES.get(dtype.lower(), 2)
    given = readable_int(flag_value(args, "--max-model-len") or "")
    context = given or next((n for key in CONTEXT_KEYS if (n := _int(config.get(key)))), 0)
    return Model(weights, 2 * layers * kv_heads * head_dim * per_value, context)


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def default_kv_cache_gib(mem_available_bytes: int) -> int:
    """A quarter of the memory available now, in whole GiB, at least 1 and at most 64 (a machine
    with no cap: vLLM's CPU engine refuses to start when its default share does not fit)."""
    share = int(mem_available_bytes * KV_CACHE_SHARE // GIB)
    return max(1, min(KV_CACHE_MAX_GIB, share))


def kv_sized(env: Mapping[str, str], args: Sequence[str]) -> bool:
    """The user sized the KV cache: VLLM_CPU_KVCACHE_SPACE, or `--kv-cache-memory-bytes`
    (which SM_VLLM_KV_CACHE_MEMORY_BYTES becomes)."""
    return bool(env.get(KV_SPACE_VAR, "").strip()) or flag_value(args, KV_BYTES_FLAG) is not None


def given_kv_bytes(env: Mapping[str, str], args: Sequence[str]) -> int | None:
    """The KV cache the user sized, in bytes: VLLM_CPU_KVCACHE_SPACE (GiB, which vLLM applies
    over the flag), else `--kv-cache-memory-bytes`; None when unsized or not a value vLLM reads
    (vLLM then says so itself)."""
    space = env.get(KV_SPACE_VAR, "").strip()
    if space:
        return int(space) * GIB if space.isdigit() else None
    return readable_int(flag_value(args, KV_BYTES_FLAG) or "")


def checks_fit(env: Mapping[str, str], args: Sequence[str], gpus: int, cap: int | None) -> bool:
    """Whether `size` weighs the model against the memory: in a capped container on CPUs,
    whose KV cache is either serve's or one the user sized in a value vLLM reads."""
    return (
        not gpus
        and cap is not None
        and (given_kv_bytes(env, args) is not None or not kv_sized(env, args))
    )


def _mib(size: int) -> str:
    return f"{size // MIB:,} MiB"


def size(
    env: Mapping[str, str],
    args: Sequence[str],
    gpus: int,
    cap: int | None,
    mem_available: int,
    found: Model,
) -> Sizing:
    """The KV cache for the CPU engine (nothing on a GPU machine), and whether the model fits
    in `cap` (the container's memory limit in bytes, None when it has none)."""
    if cap is None or not checks_fit(env, args, gpus, cap):
        if gpus or kv_sized(env, args):
            return Sizing()
        return Sizing(env={KV_SPACE_VAR: str(default_kv_cache_gib(mem_available))})
    given = given_kv_bytes(env, args)
    headroom = max(HEADROOM_MIN_BYTES, int(cap * HEADROOM_SHARE))
    base = VLLM_PROCESSES_BYTES + found.weights_bytes + headroom
    one_sequence = found.kv_bytes_per_token * found.max_model_len
    share = max(int(cap * KV_CACHE_SHARE), one_sequence + KV_STEP_BYTES - 1)
    room = min(cap - base, share, KV_CACHE_MAX_GIB * GIB) // KV_STEP_BYTES * KV_STEP_BYTES
    kv = given if given is not None else room
    need = base + max(one_sequence, KV_STEP_BYTES if given is None else given)
    parts = (
        f"weights {_mib(found.weights_bytes)}, vLLM's processes about "
        f"{_mib(VLLM_PROCESSES_BYTES)}, headroom {_mib(headroom)}"
    )
    if need > cap or kv < one_sequence:
        return Sizing(problems=[_too_small(cap, need, parts, given, found, base)])
    sized = Sizing(
        notes=[
            f"the container's memory is capped at {_mib(cap)} (its cgroup), so the KV cache "
            f"gets {_mib(kv)} ({parts})"
        ]
    )
    if given is None:
        sized.args.extend([KV_BYTES_FLAG, str(kv)])
    return sized


def _too_small(cap: int, need: int, parts: str, given: int | None, found: Model, base: int) -> str:
    """The one line of a model that does not fit in `cap`."""
    wanted = "the KV cache asked for" if given is not None else "a KV cache for"
    kv_part = (
        f"{wanted} {_mib(given)}"
        if given is not None
        else f"{wanted} one sequence of {found.max_model_len:,} tokens "
        f"({_mib(found.kv_bytes_per_token * found.max_model_len)})"
    )
    sizes = [mb for mb in SERVERLESS_MEMORY_SIZES_MB if mb * MIB >= need]
    would = (
        f"Serverless Inference's MemorySizeInMB {sizes[0]} or more"
        if sizes
        else f"more than Serverless Inference's {SERVERLESS_MEMORY_SIZES_MB[-1]} MB: an instance"
    )
    line = (
        f"the model does not fit in the container's {_mib(cap)} of memory (its cgroup's "
        f"limit): it needs about {_mib(need)} ({kv_part}, {parts}); give the container "
        f"at least {_mib(need)} ({would})"
    )
    if given is not None:
        return line + f", or a smaller KV cache ({KV_SPACE_VAR}, {KV_BYTES_VAR})"
    fits = (cap - base) // found.kv_bytes_per_token if found.kv_bytes_per_token else 0
    if fits >= 1:
        line += f", or SM_VLLM_MAX_MODEL_LEN={fits} (the longest context that fits)"
    return line
