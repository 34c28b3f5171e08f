"""The suite. `ROOT` is the checkout the tests run from."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The repository's folders that install under our namespace (pyproject.toml's package-dir).
FOLDERS = ("core", "container", "handler", "deploy")
