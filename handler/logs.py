"""The handler's log lines, on stdout beside vLLM's own (SageMaker sends both to CloudWatch).

vLLM configures only its own `vllm` logger, so the handler's logger gets a handler of its own;
otherwise its lines would be dropped.
"""

import logging
import sys

logger = logging.getLogger("vllm_sagemaker")
if not logger.handlers:
    _stream = logging.StreamHandler(sys.stdout)
    _stream.setFormatter(
        logging.Formatter("%(levelname)s %(asctime)s [sagemaker] %(message)s", "%m-%d %H:%M:%S")
    )
    logger.addHandler(_stream)
    logger.setLevel(logging.INFO)
    logger.propagate = False
