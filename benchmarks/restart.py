"""How long vLLM takes to answer: from `serve`'s start to the first `/ping` 200, with `serve`
supervising vLLM (the default) and with `PROCESS_AUTO_RECOVERY=false` (`serve` execs vLLM, as
before supervision), side by side in one run; and from a `kill -9` of the engine core to `/ping`
answering 200 again, which supervision adds (before it, the container ended and the platform
started a new instance).

The two kinds of start alternate, so a machine that gets busier or quieter weighs on both. The
model is the test suite's tiny Llama on the CPU engine: what is measured is what `serve` adds
around a load, not the load.

    .venv/bin/python -m benchmarks.restart [--runs 5]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.support import model_factory, servers

POLL_S = 0.05


def answers(server: servers.Server) -> bool:
    try:
        return httpx.get(server.url + "/ping", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def until(condition: bool, server: servers.Server) -> float:
    """The moment /ping first answers 200 (`condition` True) or first fails (False)."""
    while answers(server) is not condition:
        if server.process.poll() is not None:
            raise RuntimeError(f"serve exited with {server.process.returncode}")
        time.sleep(POLL_S)
    return time.monotonic()


def percentiles(samples: list[float]) -> str:
    cuts = statistics.quantiles(samples, n=20, method="inclusive") if len(samples) > 1 else samples
    return (
        f"p50 {statistics.median(samples):6.1f} s  p95 {cuts[-1]:6.1f} s  "
        f"max {max(samples):6.1f} s  (n={len(samples)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = model_factory.make_chat_model(root / "tiny-llama")
        starts: dict[str, list[float]] = {"exec (before)": [], "supervised (now)": []}
        restarts: list[float] = []
        for run in range(args.runs):
            for mode, recovery in (("exec (before)", "false"), ("supervised (now)", "true")):
                began = time.monotonic()
                server = servers.start(
                    f"{run}-{recovery}", model, root, PROCESS_AUTO_RECOVERY=recovery
                )
                try:
                    starts[mode].append(until(True, server) - began)
                    if recovery == "true":
                        server.engine_core().kill()
                        killed = time.monotonic()
                        until(False, server)
                        restarts.append(until(True, server) - killed)
                finally:
                    server.stop()
        print("serve's start -> first /ping 200")
        for mode, samples in starts.items():
            print(f"  {mode:>17}: {percentiles(samples)}")
        before, now = (statistics.median(samples) for samples in starts.values())
        print(f"  supervised / exec (median): {now / before:.2f}")
        print("kill -9 of the engine core -> /ping 200 again (supervised)")
        print(f"  {'restart':>17}: {percentiles(restarts)}")


if __name__ == "__main__":
    main()
