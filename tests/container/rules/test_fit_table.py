"""docs/serverless.md's "Which models fit" table, recomputed from the rule (container/memory.py):
each model's files as the Hub lists them, the weights vLLM loads of them (`weight_files`), its
config, and the KV cache `size` gives it at each of Serverless Inference's sizes, in MiB."""

from dataclasses import dataclass, field, replace

import pytest

from tests import ROOT
from vllm_sagemaker.container import memory
from vllm_sagemaker.container.env_args import flag_value
from vllm_sagemaker.container.memory import GIB, MIB
from vllm_sagemaker.core.config import SERVERLESS_MEMORY_SIZES_MB

PAGE = ROOT / "docs" / "serverless.md"
HEADING = "## Which models fit"


@dataclass(frozen=True)
class HubModel:
    """A model's files (path -> bytes, as the Hub lists them) and the config fields the rule
    reads. The weights' sizes are the Hub's; a file vLLM does not load is given the size of the
    one it loads (only its name matters)."""

    files: dict[str, int]
    config: dict[str, object]
    args: list[str] = field(default_factory=list)
    indexes: dict[str, list[str]] = field(default_factory=dict)


def bert(layers: int, hidden: int) -> dict[str, object]:
    return {
        "num_hidden_layers": layers,
        "num_attention_heads": hidden // 64,
        "hidden_size": hidden,
        "max_position_embeddings": 512,
        "torch_dtype": "float32",
    }


def decoder(layers: int, heads: int, kv_heads: int, hidden: int, context: int) -> dict[str, object]:
    return {
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_size": hidden,
        "max_position_embeddings": context,
        "torch_dtype": "bfloat16",
    }


def both(safetensors: int) -> dict[str, int]:
    """A sentence-transformers folder: the safetensors, and the same weights as .bin, ONNX."""
    return {
        "model.safetensors": safetensors,
        "pytorch_model.bin": safetensors,
        "onnx/model.onnx": safetensors,
    }


MINILM = HubModel(both(90_868_376), bert(6, 384))
BGE_BASE = HubModel(both(437_955_512), bert(12, 768))
QWEN_05B = HubModel({"model.safetensors": 988_097_824}, decoder(24, 14, 2, 896, 32768))
LLAMA_1B_FILES = {"model.safetensors": 2_471_645_608, "original/consolidated.00.pth": 2_471_645_608}
LLAMA_1B = HubModel(LLAMA_1B_FILES, {**decoder(16, 32, 8, 2048, 131072), "head_dim": 64})
QWEN_15B = HubModel({"model.safetensors": 3_087_467_144}, decoder(28, 12, 2, 1536, 32768))
QWEN_3B_SHARDS = {
    "model-00001-of-00002.safetensors": 3_968_658_944,
    "model-00002-of-00002.safetensors": 2_203_268_048,
}
QWEN_3B = HubModel(
    {**QWEN_3B_SHARDS, "model.safetensors.index.json": 35_581},
    decoder(36, 16, 2, 2048, 32768),
    indexes={"model.safetensors.index.json": sorted(QWEN_3B_SHARDS)},
)
# Each row of the table by the start of its first cell: the models it stands for.
ROWS = {
    "all-MiniLM-L6-v2": [MINILM],
    "bge-base-en-v1.5": [BGE_BASE],
    "Qwen2.5-0.5B-Instruct": [QWEN_05B],
    "Llama-3.2-1B-Instruct (": [replace(LLAMA_1B, args=["--max-model-len", "8192"])],
    "Qwen2.5-1.5B-Instruct": [QWEN_15B],
    "Llama-3.2-1B-Instruct at its 128k context": [LLAMA_1B, QWEN_3B],
}


def weights(model: HubModel) -> int:
    names = memory.weight_files(model.files, "auto", model.indexes, from_hub=True)
    assert names is not None
    return sum(model.files[name] for name in names)


def kv_cache_mib(model: HubModel, size_mb: int) -> str:
    """The table's cell: the KV cache `serve` gives the model in a container of `size_mb`, in
    MiB, or "no"."""
    found = memory.model(model.config, weights(model), model.args)
    sized = memory.size({}, model.args, 0, size_mb * MIB, 24 * GIB, found)
    if sized.problems:
        return "no"
    return str(int(flag_value(sized.args, memory.KV_BYTES_FLAG) or 0) // MIB)


def table() -> dict[str, list[str]]:
    """The table's rows below HEADING: first cell -> the other cells."""
    text = PAGE.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    # rows[0] is the header, rows[1] the line under it.
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows[2:]}


def test_the_table_has_a_column_per_serverless_size_and_the_rows_here() -> None:
    text = PAGE.read_text().split(HEADING, 1)[1]
    header = next(line for line in text.splitlines() if line.startswith("| model"))
    assert header.split("|")[2:-1] == [f" {mb} " for mb in SERVERLESS_MEMORY_SIZES_MB]
    labels = list(table())
    assert len(labels) == len(ROWS)
    for start in ROWS:
        assert sum(label.startswith(start) for label in labels) == 1, start


@pytest.mark.parametrize("start", ROWS)
def test_each_row_is_what_the_rule_gives(start: str) -> None:
    (label,) = [label for label in table() if label.startswith(start)]
    for model in ROWS[start]:
        expected = [kv_cache_mib(model, mb) for mb in SERVERLESS_MEMORY_SIZES_MB]
        assert table()[label] == expected, (label, expected)
    # The label names the weights of the row's last model, as the rule counts them.
    assert f"{weights(ROWS[start][-1]) // MIB:,} MiB" in label, label


def test_a_folder_with_safetensors_and_bin_counts_its_weights_once() -> None:
    """bge-base-en-v1.5 ships both: counted twice, 2048 MB would refuse it."""
    assert weights(BGE_BASE) == 437_955_512
    assert kv_cache_mib(BGE_BASE, 2048) != "no"
    found = memory.model(BGE_BASE.config, 2 * weights(BGE_BASE), [])
    assert memory.size({}, [], 0, 2048 * MIB, 24 * GIB, found).problems
