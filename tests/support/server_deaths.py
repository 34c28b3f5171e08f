"""A test whose server died fails with the death, not with a connection error (a pytest plugin,
loaded by tests/conftest.py).

Every server runs with Python's fault handler on (`serve` sets PYTHONFAULTHANDLER), so a fatal
signal in any of vLLM's processes prints its stacks into the server's log, and vLLM and `serve`
log each death of a process. When a test fails, the deaths any server logged since the test
began (all are read: a test may reach a server through another fixture) are put in front of its
failure: a fatal signal (SIGILL, SIGSEGV, ...) becomes the failure's headline, every death and
the log's tail a section of its report. A server the test uses (or started) that had already
exited with a failure says so too.

Core dumps are off for everything the suite starts: a crashing engine would otherwise write
gigabytes, or hand them to the machine's crash collector.
"""

import re
import resource
import signal
from collections.abc import Generator, Iterator
from dataclasses import dataclass

import pytest

from tests.support import servers

# Signals no test sends: a process that dies of one crashed.
CRASHES = frozenset({"SIGILL", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGABRT"})
# What Python's fault handler prints first for each fatal signal it catches.
FAULT_HANDLER_NAMES = {
    "Illegal instruction": "SIGILL",
    "Segmentation fault": "SIGSEGV",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Aborted": "SIGABRT",
}
# The lines that report a death: the fault handler's, vLLM's (a worker, an engine core, an API
# server process) and serve's (vLLM's server as a whole). Named groups give the cause.
DEATH_LINE = re.compile(
    r"Fatal Python error: (?P<fault>[A-Za-z ]+)"
    r"|Worker proc \S+ died unexpectedly \(exit code: (?P<worker>-?\d+|None)\)"
    r"|Process \S+ \(PID: \d+\) died with exit code (?P<process>-?\d+)"
    r"|Engine core process \S+ died unexpectedly"
    r"|serve: vLLM (?:exited with status \d+|was killed by (?P<serve>SIG[A-Z0-9]+))"
)
# How much of a fault handler's report (the stacks after its first line) goes in the section.
STACK_LINES = 40
TAIL_LINES = 40
_MARKS = pytest.StashKey[dict[int, int]]()


@dataclass(frozen=True)
class Death:
    """One line of a log that reports a death, and the signal it names (None: none named)."""

    line: str
    signal: str | None

    @property
    def crash(self) -> bool:
        return self.signal in CRASHES


def _signal_of_code(code: str | None) -> str | None:
    """The signal a multiprocessing exit code names (a negative number), else None."""
    if code is None or not code.lstrip("-").isdigit() or int(code) >= 0:
        return None
    try:
        return signal.Signals(-int(code)).name
    except ValueError:
        return f"signal {-int(code)}"


def deaths_in(text: str) -> list[Death]:
    """Every line of a server log that reports a death, in order."""
    found = []
    for line in text.splitlines():
        match = DEATH_LINE.search(line)
        if match is None:
            continue
        if match["fault"]:
            name = FAULT_HANDLER_NAMES.get(match["fault"].strip())
        elif match["serve"]:
            name = match["serve"]
        else:
            name = _signal_of_code(match["worker"] or match["process"])
        found.append(Death(line.strip(), name))
    return found


def fault_stack(text: str) -> str:
    """The fault handler's first report in `text` (its line and the stacks after it), or ''."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "Fatal Python error:" in line:
            return "\n".join(lines[index : index + 1 + STACK_LINES])
    return ""


@dataclass(frozen=True)
class Explanation:
    """What a test is told of one of its servers: the deaths it logged while the test ran, the
    failed exit status of a `serve` that is gone (None: it runs, or stopped as asked), and the
    report section that shows them with the log."""

    server: str
    deaths: list[Death]
    status: int | None
    section: str

    @property
    def headline(self) -> str | None:
        """The failure's new headline: a crash, else a server gone; None for deaths a test
        causes itself (a kill, a restart)."""
        crashes = [death for death in self.deaths if death.crash]
        if crashes:
            return f"a server crashed: {self.server}: {crashes[0].signal} ({crashes[0].line})"
        if self.status is not None:
            return f"a server is gone: {self.server}: serve has exited with status {self.status}"
        return None


def explain(server: servers.Server, since: int, used: bool) -> Explanation | None:
    """What `server` logged of deaths after byte `since` of its log, and, for a server the test
    `used`, whether it is gone; None when there is neither."""
    text = server.log_path.read_bytes()[since:].decode(errors="replace")
    deaths = deaths_in(text)
    status = server.process.poll()
    failed = status if used and status is not None and status > 0 else None
    if not deaths and failed is None:
        return None
    parts = [f"{server.name} ({server.log_path}):"]
    parts += [f"  {death.line}" for death in deaths]
    if failed is not None:
        parts.append(f"  serve has exited with status {failed}")
    stack = fault_stack(text)
    if stack:
        parts += ["", "The fault handler's report:", stack]
    parts += ["", f"The log's last {TAIL_LINES} lines:", server.log_tail(TAIL_LINES)]
    return Explanation(server.name, deaths, failed, "\n".join(parts))


def _servers_of(item: pytest.Item) -> Iterator[servers.Server]:
    """The servers among a test's fixture values (a server, or a mapping of them)."""
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, servers.Server):
            yield value
        elif isinstance(value, dict):
            yield from (v for v in value.values() if isinstance(v, servers.Server))


def pytest_configure(config: pytest.Config) -> None:
    """Core dumps off for this process and all it starts. The limit is 1 byte, not 0: a
    core_pattern that pipes to a program (systemd-coredump, apport) ignores any other limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    soft = 1 if hard == resource.RLIM_INFINITY else min(1, hard)
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Where each server's log stands as the test begins (before its fixtures start any)."""
    item.stash[_MARKS] = {id(s): s.log_path.stat().st_size for s in servers.STARTED}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report, with what its servers logged of deaths while it ran."""
    report = yield
    marks = item.stash.get(_MARKS, None)
    if not report.failed or marks is None:
        return report
    used = {id(s) for s in _servers_of(item)} | {
        id(s) for s in servers.STARTED if id(s) not in marks
    }
    explained = [
        found
        for server in servers.STARTED
        if (found := explain(server, marks.get(id(server), 0), id(server) in used)) is not None
    ]
    if explained:
        report.sections.append(("servers that died", "\n\n".join(e.section for e in explained)))
        headlines = [e.headline for e in explained if e.headline]
        crash = getattr(report.longrepr, "reprcrash", None)
        if headlines and crash is not None:
            crash.message = f"{headlines[0]}; the test saw: {crash.message}"
    return report
