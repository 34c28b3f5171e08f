"""What one `vllm-sagemaker batch` run is asked to do: its input and outputs, its target, and
how many lines it keeps in flight and how often it retries."""

from dataclasses import dataclass

from vllm_sagemaker.deploy.base import invoke

DEFAULT_MAX_INFLIGHT = 512
DEFAULT_RETRIES = 5


@dataclass(frozen=True)
class BatchSettings:
    input: str
    output: str
    error_file: str | None = None
    endpoint: str | None = None
    sagemaker_endpoint: str | None = None
    region: str | None = None
    inference_component: str | None = None
    model: str | None = None
    serve_args: tuple[str, ...] = ()
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    max_retries: int = DEFAULT_RETRIES
    resume: bool = False
    # Where remote, .gz and stdout outputs are staged (None: the system's temporary directory).
    output_tmp_dir: str | None = None
    timeout_s: float = 600.0
    # The key sent to --endpoint's container, or required by --model's engine (None there: a
    # fresh random one).
    api_key: str | None = None
    # How long --endpoint's container is waited for while it is starting.
    wait_ready_s: float = invoke.READY_WAIT_S
