"""The batch admission controller on the server's Prometheus `/metrics`, beside vLLM's own.

With several API-server processes every process has its own window, and `/metrics` combines
their values as each gauge's `multiprocess_mode` says: the slots and the lines in flight add up
over the processes (the container's), the latencies, the target and the lag are the slowest
process's. The window's gauges read its state through `handler.metrics.gauges.follow`.
"""

from prometheus_client import Counter, Gauge

WINDOW = Gauge(
    "vllm_sagemaker:batch_window",
    "Batch lines and batch-marked records allowed in flight now.",
    multiprocess_mode="livesum",
)
RUNNING = Gauge(
    "vllm_sagemaker:batch_running",
    "Batch lines and batch-marked records in flight now.",
    multiprocess_mode="livesum",
)
LIVE_LATENCY = Gauge(
    "vllm_sagemaker:live_latency_seconds",
    "Live requests' time to the first response byte, moving average.",
    multiprocess_mode="livemax",
)
LIVE_TAIL = Gauge(
    "vllm_sagemaker:live_latency_p95_seconds",
    "The p95 of the latest live requests beside batch work, what the window is held to the "
    "target by (0 before any).",
    multiprocess_mode="livemax",
)
LIVE_TARGET = Gauge(
    "vllm_sagemaker:live_latency_target_seconds",
    "The live latency batch work is held to (0 while it is still learned).",
    multiprocess_mode="livemax",
)
LOOP_LAG = Gauge(
    "vllm_sagemaker:api_server_lag_seconds",
    "How late the API server's event loop wakes while batch work runs (moving average); above "
    "its target the batch's cap halves.",
    multiprocess_mode="livemax",
)
PREEMPTIONS = Counter(
    "vllm_sagemaker:batch_preemptions",
    "Running batch lines aborted for live traffic and queued to run again.",
)
THROTTLED = Counter(
    "vllm_sagemaker:batch_throttled",
    "Batch-marked invocations answered 429 with Retry-After.",
)
LINES_DONE = Counter(
    "vllm_sagemaker:batch_lines_done",
    "Server-side batch lines answered (their result written), successes and errors alike.",
)
BATCH_RUNS = Gauge(
    "vllm_sagemaker:batch_runs",
    "Batches (with the S3 store, chunks of one) whose lines this process is running now.",
    multiprocess_mode="livesum",
)
