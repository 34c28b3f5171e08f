"""A container whose /execution-parameters answers a value that is not a whole number: the
transform does not start (one line, exit status 2) and nothing is sent to /invocations."""

import http.server
import json
from pathlib import Path

from tests.support import cli
from tests.support.local_http import serving


def test_a_non_numeric_execution_parameter_stops_the_job_before_any_call(tmp_path: Path) -> None:
    posts: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"MaxPayloadInMB": "x"}).encode() if "execution" in self.path else b""
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            posts.append(self.path)
            self.send_response(500)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"prompt": "a"}\n')
    with serving(Handler) as url:
        args = cli.options(endpoint=url, input=str(tmp_path / "in"), output=str(tmp_path / "out"))
        done = cli.run("transform", *args, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "transform: the container's /execution-parameters gives MaxPayloadInMB 'x', not a whole "
        "number: set --max-payload-mb"
    ]
    assert posts == []
