"""Container images: build them (docker, buildah, podman)."""
