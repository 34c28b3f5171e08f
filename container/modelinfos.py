"""vLLM's model-class facts, worked out once when the image is built and given to every start.

Before it serves, vLLM inspects the model's class (is it multimodal, does it take LoRA, ...) in a
fresh Python subprocess that imports vLLM and torch again, and keeps the answer in
`$VLLM_CACHE_ROOT/modelinfos/<module>-<class>.json`, keyed by a hash of the model's source file
(`model_executor/models/registry.py: _LazyRegisteredModel.inspect_model_cls`). A container whose
cache starts empty at each start (a read-only root, SageMaker Serverless Inference's fresh
sandboxes, a new instance) pays that subprocess on every cold start: 8-9 s of one CPU.

`build` inspects every architecture vLLM registers, in this one process, into a directory of the
image (`python -m vllm_sagemaker.container.modelinfos DIR`, a Dockerfile step); `serve` copies
what the cache lacks from there before vLLM starts (`seed`). vLLM checks each file's hash as it
reads it, so a file that does not match the installed vLLM is worked out again, as without it.
tests/container/test_modelinfos.py pins the names of vLLM's this relies on.
"""

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# The cache root the image keeps what `build` made in (under SUBDIR, as vLLM's own).
PREBUILT = Path("/opt/vllm-sagemaker/vllm-cache")
SUBDIR = "modelinfos"


def cache_root(env: Mapping[str, str]) -> Path:
    """vLLM's cache root as vLLM reads it from `env` (`vllm.envs.VLLM_CACHE_ROOT`)."""
    if env.get("VLLM_CACHE_ROOT"):
        return Path(os.path.expanduser(env["VLLM_CACHE_ROOT"]))
    home = env.get("HOME") or os.path.expanduser("~")
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return Path(xdg) / "vllm"


def seed(env: Mapping[str, str], prebuilt: Path = PREBUILT) -> int:
    """Copy the prebuilt model-class facts the cache of `env` lacks; how many were copied (0
    when there are none to copy or the cache cannot be written)."""
    sources = sorted((prebuilt / SUBDIR).glob("*.json"))
    target = cache_root(env) / SUBDIR
    copied = 0
    if not sources or target == prebuilt / SUBDIR:
        return 0
    try:
        target.mkdir(parents=True, exist_ok=True)
        for source in sources:
            if not (target / source.name).exists():
                shutil.copyfile(source, target / source.name)
                copied += 1
    except OSError:
        return copied
    return copied


def build(root: Path, archs: Sequence[str] = ()) -> tuple[int, int]:
    """Inspect every lazily registered architecture of this vLLM (or those of `archs`) in this
    process, into the cache root `root`: (written, failed). An architecture whose module does
    not import here is left to vLLM at start, as without this."""
    os.environ["VLLM_CACHE_ROOT"] = str(root)
    from vllm.model_executor.models import registry

    # In this process: the subprocess exists to keep CUDA out of vLLM's server process.
    registry._run_in_subprocess = lambda fn: fn()
    written = failed = 0
    for arch in archs or registry.ModelRegistry.get_supported_archs():
        model = registry.ModelRegistry.models[arch]
        if not isinstance(model, registry._LazyRegisteredModel):
            continue
        try:
            model.inspect_model_cls()
            written += 1
        except Exception:
            failed += 1
    # vLLM writes each file owner-only; a container may run as any user.
    for path in (root / SUBDIR).glob("*.json"):
        path.chmod(0o644)
    return written, failed


def main(argv: list[str] | None = None) -> int:
    """`python -m vllm_sagemaker.container.modelinfos [ROOT]`: build into the cache root ROOT
    (the image's PREBUILT)."""
    args = sys.argv[1:] if argv is None else argv
    written, failed = build(Path(args[0]) if args else PREBUILT)
    print(f"modelinfos: {written} architectures inspected, {failed} not importable here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
