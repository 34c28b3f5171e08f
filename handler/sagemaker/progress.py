"""The records `/invocations` has answered, on `/metrics`: a Batch Transform job's progress (one
record per input line; SageMaker tells the container neither how many lines a job has nor how
far it is), and a real-time endpoint's records alike. A record answered with an error line
counts as `outcome="error"`; counters add up over the API-server processes.
"""

from prometheus_client import Counter

from vllm_sagemaker.handler.records.context import Tally

OK = "ok"
ERROR = "error"
RECORDS = Counter(
    "vllm_sagemaker:invocation_records",
    "Records /invocations answered (in Batch Transform, the job's lines), by outcome: ok, or "
    "an error line or error answer.",
    ["outcome"],
)
# Both series from the start, so a rate over them has a first point at 0.
for _outcome in (OK, ERROR):
    RECORDS.labels(_outcome)


def count(tally: Tally) -> None:
    """One invocation's records, once it is answered."""
    RECORDS.labels(OK).inc(tally.records - tally.failed)
    RECORDS.labels(ERROR).inc(tally.failed)
