"""Container images: build them (docker, buildah, podman) and check the GPU image's pins."""
