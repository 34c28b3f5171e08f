"""The handler's log lines, on stdout beside vLLM's own (SageMaker sends both to CloudWatch).

vLLM configures only its own `vllm` logger, so the handler's logger gets a handler of its own;
otherwise its lines would be dropped. Lines carry the process id, since vLLM may run several
API-server processes (--api-server-count).
"""

import json
import logging
import sys

logger = logging.getLogger("vllm_sagemaker")
if not logger.handlers:
    _stream = logging.StreamHandler(sys.stdout)
    _stream.setFormatter(
        logging.Formatter(
            "%(levelname)s %(asctime)s [sagemaker pid=%(process)d] %(message)s", "%m-%d %H:%M:%S"
        )
    )
    logger.addHandler(_stream)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def logfmt(event: str, **fields: object) -> str:
    """`event key=value ...`: None as `-`, values with spaces or quotes JSON-quoted."""
    parts = [event]
    for key, value in fields.items():
        text = "-" if value is None or value == "" else str(value)
        if any(c in text for c in ' "='):
            text = json.dumps(text)
        parts.append(f"{key}={text}")
    return " ".join(parts)
