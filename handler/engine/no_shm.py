"""vLLM's engine where /dev/shm is absent or read-only (SageMaker Serverless Inference may give a
container none, as Lambda gives none): the one POSIX semaphore of an engine that runs the model
in its own process, replaced by a thread lock.

With no /dev/shm, `serve` runs the CPU model in the engine core's process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, `container.system`), so no shared-memory queue is made.
That process's executor still asks for `multiprocessing.Lock()` as the worker's
`shared_worker_lock` (vLLM 0.32, `v1/executor/uniproc_executor.py`, imported there as
`from multiprocessing import Lock`), and a POSIX semaphore lives in /dev/shm: the engine dies
with `FileNotFoundError` from `SemLock`. One worker in one process needs no lock between
processes, so a thread lock does the same work.

The package registers `register` as a vLLM general plugin (entry point `vllm.general_plugins`),
which vLLM loads in its engine core before it makes the executor (`EngineCore.__init__`).
tests/handler/test_no_shm.py pins the names this relies on in vLLM's code.
"""

import importlib
import threading

from vllm_sagemaker.core.shm import SHM_PATH, shm_usable
from vllm_sagemaker.handler.process.logs import logfmt, logger

# vLLM's module that takes `Lock` from multiprocessing, and the name it holds it under.
EXECUTOR_MODULE = "vllm.v1.executor.uniproc_executor"
LOCK_NAME = "Lock"


def register() -> None:
    """vLLM's general-plugin hook: without a usable /dev/shm, give the in-process executor a
    thread lock, and log it once per process."""
    if shm_usable():
        return
    executor = importlib.import_module(EXECUTOR_MODULE)
    setattr(executor, LOCK_NAME, threading.Lock)
    logger.info(logfmt("no_shm", path=SHM_PATH, lock="threading.Lock"))
