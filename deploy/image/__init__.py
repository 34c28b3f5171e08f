"""Container images: build the CPU or GPU image with docker or buildah, and check that the GPU
image's one install step moves none of vLLM's pins."""
