"""Server memory while a large file goes up to `/v1/files` and comes back down.

Starts `serve` on all-MiniLM-L6-v2 (the Files API needs no particular model), uploads a JSON
Lines file of SIZE MiB with the `openai` SDK (streamed from disk), downloads it, and samples the
resident memory of the API-server process (and its children) every 50 ms. Prints the peak
growth over the idle server during each transfer, as a ratio of the file's size:

    .venv/bin/python -m benchmarks.files_memory [--size-mb 200]
"""

import argparse
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import openai
import psutil

from tests.support import model_factory, servers

MIB = 1024 * 1024


def rss(process: psutil.Process) -> int:
    """Resident bytes of the server process alone (its engine is another process)."""
    return process.memory_info().rss


def peak_during(process: psutil.Process, work: Callable[[], None]) -> int:
    """The highest RSS of `process` sampled every 50 ms while `work` runs."""
    peak = rss(process)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss(process))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        work()
    finally:
        done.set()
        sampler.join()
    return peak


def write_lines(path: Path, size: int) -> None:
    line = (
        b'{"custom_id": "%09d", "method": "POST", "url": "/v1/embeddings", '
        b'"body": {"input": "' + b"x" * 400 + b'"}}\n'
    )
    with path.open("wb") as out:
        for index in range(size // len(line % 0)):
            out.write(line % index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "requests.jsonl"
        write_lines(data, args.size_mb * MIB)
        size = data.stat().st_size
        env = {"SAGEMAKER_BATCH_STORE": str(root / "store")}
        with servers.running({"files": model_factory.embedder_path()}, root, {"files": env}) as up:
            server = up["files"]
            # vLLM's API server, the child `serve` supervises.
            [process] = psutil.Process(server.process.pid).children()
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=600)
            client.files.list()
            idle = rss(process)
            uploaded: list[str] = []

            def upload() -> None:
                with data.open("rb") as body:
                    uploaded.append(client.files.create(file=body, purpose="batch").id)

            def download() -> None:
                copy = root / "copy.jsonl"
                client.files.content(uploaded[0]).write_to_file(copy)
                assert copy.stat().st_size == size

            started = time.perf_counter()
            up_peak = peak_during(process, upload)
            up_s = time.perf_counter() - started
            started = time.perf_counter()
            down_peak = peak_during(process, download)
            down_s = time.perf_counter() - started
        print(f"file: {size / MIB:.0f} MiB; idle server RSS {idle / MIB:.0f} MiB")
        for name, peak, seconds in (("upload", up_peak, up_s), ("download", down_peak, down_s)):
            growth = max(0, peak - idle)
            print(
                f"{name}: {seconds:.1f} s, peak RSS +{growth / MIB:.1f} MiB "
                f"= {growth / size:.3f} x the file"
            )


if __name__ == "__main__":
    main()
