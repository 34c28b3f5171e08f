# vllm-sagemaker: vLLM's OpenAI server with the SageMaker handler, started as `docker run IMAGE serve`.
# The base pins the vLLM release this project is tested against (the CPU build of the same
# release runs the test suite).
FROM vllm/vllm-openai:v0.32.0

LABEL com.amazonaws.sagemaker.capabilities.accept-bind-to-port=true

# SageMaker runs containers as root (the base image's user) and sends SIGTERM to PID 1:
# no USER switch, no init wrapper such as tini (it trips on the `serve` argument).

WORKDIR /opt/vllm-sagemaker
COPY pyproject.toml README.md ./
COPY container ./container
COPY handler ./handler
COPY deploy ./deploy
RUN python3 -m pip install --no-cache-dir "./[server]" \
    && serve --help > /dev/null

ENV PYTHONUNBUFFERED=1
EXPOSE 8080

# Exec form, so `serve` is PID 1 and execs vLLM, which receives SageMaker's SIGTERM itself.
ENTRYPOINT ["serve"]
