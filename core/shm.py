"""/dev/shm: where POSIX shared memory and semaphores live, and whether this process may make
files there. Docker and podman give a container 64 MB of it by default; SageMaker Serverless
Inference may give none, or one the container's user cannot write. `serve` (the engine's
executor), the engine's plugin (its lock) and the sessions' store each ask here."""

import os

SHM_PATH = "/dev/shm"


def writable_dir(path: str) -> bool:
    """`path` is a folder this process may make files in."""
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def shm_usable(path: str = SHM_PATH) -> bool:
    """/dev/shm exists and this process may make files in it (a POSIX semaphore is one)."""
    return writable_dir(path)
