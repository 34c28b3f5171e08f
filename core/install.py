"""Which install this is: the client (`pip install .` from a checkout) or the server beside vLLM.

The client runs the deploy kit and the batch tools. Commands that start vLLM (`serve`,
`batch --model`) need the server install; they ask here first and say in one line what to
install instead of failing on an import deep inside vLLM.
"""

import importlib.util

# What the server needs that the client does not bring: vLLM (it brings starlette, fastapi and
# MHCS) and the form parser of the Files API.
SERVER_MODULES = ("vllm", "python_multipart")

SERVER_INSTALL = (
    "from a checkout of vllm-sagemaker, run pip install '.[server]' where vLLM is installed, "
    "or pip install '.[cpu]' for vLLM's CPU build"
)


def missing_server_modules() -> list[str]:
    """The server's modules this interpreter cannot import."""
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


def server_missing(command: str) -> str | None:
    """One line saying what to install for `command`, or None when the server is installed."""
    missing = missing_server_modules()
    if not missing:
        return None
    return f"{command} needs the server install (no {', '.join(missing)} here): {SERVER_INSTALL}"
