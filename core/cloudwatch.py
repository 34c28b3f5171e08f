"""The container's CloudWatch metrics, by name: what the server writes as EMF documents to stdout
(SageMaker ships the container's stdout to CloudWatch Logs, which turns them into metrics) and
what the deploy kit scales and draws dashboards on. One table, so both sides agree.
"""

from typing import Final

# `cloudwatch` turns the EMF documents on; unset (the default) writes none: CloudWatch bills
# custom metrics.
METRICS_VARIABLE: Final = "SAGEMAKER_METRICS"
METRICS_ON: Final = "cloudwatch"
INTERVAL_VARIABLE: Final = "SAGEMAKER_METRICS_INTERVAL_SECONDS"
DEFAULT_INTERVAL_S: Final = 60
NAMESPACE_VARIABLE: Final = "SAGEMAKER_METRICS_NAMESPACE"
DEFAULT_NAMESPACE: Final = "vLLM/SageMaker"
# The dimensions, named as SageMaker's own endpoint metrics name theirs (AWS/SageMaker), so a
# dashboard or an alarm selects ours and the platform's alike. The kit sets both variables in the
# model's environment; a container started by hand reports the defaults.
ENDPOINT_VARIABLE: Final = "SAGEMAKER_METRICS_ENDPOINT_NAME"
VARIANT_VARIABLE: Final = "SAGEMAKER_METRICS_VARIANT_NAME"
DEFAULT_ENDPOINT: Final = "local"
DEFAULT_VARIANT: Final = "AllTraffic"
ENDPOINT_DIMENSION: Final = "EndpointName"
VARIANT_DIMENSION: Final = "VariantName"

# The metrics (name: CloudWatch unit). Latencies go out in EMF's values/counts form, so
# CloudWatch computes their percentiles.
REQUESTS_RUNNING: Final = "RequestsRunning"
REQUESTS_WAITING: Final = "RequestsWaiting"
KV_CACHE_USAGE: Final = "KVCacheUsage"
TIME_TO_FIRST_TOKEN: Final = "TimeToFirstToken"
END_TO_END_LATENCY: Final = "EndToEndLatency"
PROMPT_TOKENS_PER_SECOND: Final = "PromptTokensPerSecond"
GENERATION_TOKENS_PER_SECOND: Final = "GenerationTokensPerSecond"
BATCH_LINES_DONE: Final = "BatchLinesDone"
BATCHES_IN_PROGRESS: Final = "BatchesInProgress"
BATCH_THROTTLED: Final = "BatchRequestsThrottled"
BATCH_PREEMPTED: Final = "BatchLinesPreempted"
ENGINE_RESTARTS: Final = "EngineRestarts"

UNITS: Final = {
    REQUESTS_RUNNING: "Count",
    REQUESTS_WAITING: "Count",
    KV_CACHE_USAGE: "Percent",
    TIME_TO_FIRST_TOKEN: "Milliseconds",
    END_TO_END_LATENCY: "Milliseconds",
    PROMPT_TOKENS_PER_SECOND: "Count/Second",
    GENERATION_TOKENS_PER_SECOND: "Count/Second",
    BATCH_LINES_DONE: "Count",
    BATCHES_IN_PROGRESS: "Count",
    BATCH_THROTTLED: "Count",
    BATCH_PREEMPTED: "Count",
    ENGINE_RESTARTS: "Count",
}
