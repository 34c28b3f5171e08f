"""vLLM's model-class facts built into the image (container/modelinfos.py), pinned against
vLLM's own cache: what `build` writes and `serve` seeds is what vLLM reads instead of inspecting
the class in a subprocess."""

import stat
import subprocess
import sys
from pathlib import Path

from vllm_sagemaker.container import modelinfos

ARCH = "LlamaForCausalLM"
# vLLM inspects a class from the cache of VLLM_CACHE_ROOT; its subprocess must not run.
READ_FROM_CACHE = f"""
from vllm.model_executor.models import registry
def refused(fn):
    raise AssertionError("vLLM inspected the class in a subprocess")
registry._run_in_subprocess = refused
info = registry.ModelRegistry.models["{ARCH}"].inspect_model_cls()
print(info.supports_pp)
"""


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )


def test_what_the_image_builds_is_what_vllm_reads(tmp_path: Path) -> None:
    prebuilt, cache = tmp_path / "prebuilt", tmp_path / "cache"
    built = python(
        "from pathlib import Path\n"
        "from vllm_sagemaker.container import modelinfos\n"
        f"print(modelinfos.build(Path({str(prebuilt)!r}), [{ARCH!r}]))",
        {"PATH": "/usr/bin:/bin"},
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.strip().splitlines()[-1] == "(1, 0)"
    (written,) = (prebuilt / modelinfos.SUBDIR).glob("*.json")
    # Any user may read it (a container may run under any uid).
    assert stat.S_IMODE(written.stat().st_mode) == 0o644

    assert modelinfos.seed({"VLLM_CACHE_ROOT": str(cache)}, prebuilt) == 1
    assert modelinfos.seed({"VLLM_CACHE_ROOT": str(cache)}, prebuilt) == 0
    read = python(READ_FROM_CACHE, {"PATH": "/usr/bin:/bin", "VLLM_CACHE_ROOT": str(cache)})
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip().splitlines()[-1] == "True"


def test_the_cache_root_is_vllm_s() -> None:
    assert modelinfos.cache_root({"VLLM_CACHE_ROOT": "/x"}) == Path("/x")
    assert modelinfos.cache_root({"HOME": "/tmp"}) == Path("/tmp/.cache/vllm")
    assert modelinfos.cache_root({"HOME": "/h", "XDG_CACHE_HOME": "/c"}) == Path("/c/vllm")


def test_nothing_to_seed_is_nothing(tmp_path: Path) -> None:
    assert modelinfos.seed({"VLLM_CACHE_ROOT": str(tmp_path / "c")}, tmp_path / "none") == 0
