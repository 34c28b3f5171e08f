"""The suite. `ROOT` is the checkout the tests run from."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
