"""The table of `vllm serve`'s options (`core/vllm_options.py`) is the installed vLLM's,
and `serve` stops on a name vLLM does not have before it starts vLLM. No engine starts: vLLM
only builds its parser, in a process of its own."""

import json
import sys
from argparse import ArgumentTypeError

import pytest
from vllm.utils.argparse_utils import human_readable_int

from tests.container.test_serve import run_serve
from tests.support import processes, vllm_options
from vllm_sagemaker.core import environment, sm_vllm
from vllm_sagemaker.core.vllm_options import LONG_OPTIONS, SHORT_OPTIONS, VLLM_VERSION

REGENERATE = "rewrite it with `.venv/bin/python -m tests.support.vllm_options`"


def test_the_table_is_vllms_own_parser() -> None:
    done = processes.run(
        [sys.executable, "-m", "tests.support.vllm_options", "--json"], text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    # The last line: vLLM's plugins may log on stdout first.
    found = vllm_options.Options(**json.loads(done.stdout.splitlines()[-1]))
    assert found.version == VLLM_VERSION, REGENERATE
    long = set(found.long)
    assert (sorted(long - LONG_OPTIONS), sorted(LONG_OPTIONS - long)) == ([], []), (
        f"(options vLLM has that the table lacks, options the table has that vLLM lacks): "
        f"{REGENERATE}"
    )
    assert found.short == SHORT_OPTIONS, REGENERATE
    assert vllm_options.PATH.read_text() == vllm_options.render(found), REGENERATE


def test_serve_stops_on_a_misspelled_name_before_vllm() -> None:
    """One line, exit status 2, and vLLM never started (its usage line would show)."""
    result = run_serve("serve", SM_VLLM_MODEL="/m", SM_VLLM_MAX_MODLE_LEN="8192")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"serve: {sm_vllm.unknown_flag('SM_VLLM_MAX_MODLE_LEN')}"]
    assert "did you mean SM_VLLM_MAX_MODEL_LEN (--max-model-len)?" in result.stderr


@pytest.mark.parametrize(
    "value", ["0", "4096", "1k", "1K", "25.6k", "2M", "3G", "1t", "1.5G", "x", ""]
)
def test_a_size_is_read_as_vllm_reads_it(value: str) -> None:
    """serve's reading of a size option (core/environment.py) against vLLM's own."""
    try:
        theirs: int | None = human_readable_int(value)
    except (ArgumentTypeError, ValueError):
        theirs = None
    assert environment.readable_int(value) == theirs
