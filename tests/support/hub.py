"""A local stand-in for the Hugging Face Hub (HF_ENDPOINT points at it): the model-info endpoint
with the repository's files and their sizes, and its small files' contents, as huggingface_hub
2.x asks for them and the Hub answers.

- `GET /api/models/{repo}[/revision/{rev}]?blobs=True` (`HfApi.model_info(files_metadata=True)`):
  `id`, `sha` and `siblings`, each `{"rfilename", "blobId", "size"}` and, for an LFS file,
  `"lfs": {"sha256", "size", "pointerSize"}`.
- `GET /{repo}/resolve/{rev}/{path}`: a file given as bytes. A weight is given as a size only:
  it is listed with that size, and a request for it is recorded and refused (nothing here
  downloads weights).
- A repository it does not hold, or a private one asked for without its token: 401 without a
  token, 404 with one, `X-Error-Code: RepoNotFound` (the Hub's answer); an unknown revision:
  404, `X-Error-Code: RevisionNotFound`.

Every request's method, path and Authorization header are kept in `requests`.
"""

import contextlib
import hashlib
import http.server
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from tests.support.local_http import serving

# The commit every repository here is at.
SHA = "0123456789abcdef0123456789abcdef01234567"
INFO = re.compile(r"^/api/models/(?P<repo>[^/]+(?:/[^/]+)?)(?:/revision/(?P<rev>[^/]+))?$")
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+|[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
REVISIONS = ("main", SHA)


@dataclass
class Repo:
    """A model repository: files as bytes (served) or sizes (weights, listed only)."""

    files: dict[str, bytes | int]
    token: str | None = None


@dataclass
class Hub:
    url: str
    repos: dict[str, Repo]
    requests: list[tuple[str, str, str]] = field(default_factory=list)


def sibling(name: str, content: bytes | int) -> dict[str, object]:
    """One entry of `siblings` as the Hub gives it with `blobs=True`."""
    if isinstance(content, bytes):
        return {
            "rfilename": name,
            "blobId": hashlib.sha1(content).hexdigest(),
            "size": len(content),
        }
    digest = hashlib.sha256(name.encode()).hexdigest()
    return {
        "rfilename": name,
        "blobId": digest[:40],
        "size": content,
        "lfs": {"sha256": digest, "size": content, "pointerSize": 134},
    }


def _handler(hub: Hub) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path)
            auth = self.headers.get("Authorization", "")
            hub.requests.append((self.command, path, auth))
            if info := INFO.match(path):
                self.info(info["repo"], info["rev"], auth)
            elif resolve := RESOLVE.match(path):
                self.resolve(resolve["repo"], resolve["rev"], resolve["path"], auth)
            else:
                self.reply(404, {"error": "not found"})

        def repo(self, name: str, revision: str | None, auth: str) -> Repo | None:
            repo = hub.repos.get(name)
            if repo is None or (repo.token and auth != f"Bearer {repo.token}"):
                self.reply(
                    404 if auth else 401,
                    {"error": "Repository not found"},
                    {"X-Error-Code": "RepoNotFound"},
                )
                return None
            if revision not in (None, *REVISIONS):
                self.reply(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
                return None
            return repo

        def info(self, name: str, revision: str | None, auth: str) -> None:
            repo = self.repo(name, revision, auth)
            if repo is not None:
                siblings = [sibling(n, c) for n, c in sorted(repo.files.items())]
                self.reply(200, {"_id": name, "id": name, "sha": SHA, "siblings": siblings})

        def resolve(self, name: str, revision: str, path: str, auth: str) -> None:
            repo = self.repo(name, revision, auth)
            if repo is None:
                return
            content = repo.files.get(path)
            if content is None:
                self.reply(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
            elif isinstance(content, int):
                self.reply(403, {"error": "this stand-in serves no weights"})
            else:
                self.send_response(200)
                self.send_header("Content-Length", str(len(content)))
                self.send_header("X-Repo-Commit", SHA)
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(content)

        def reply(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
            content = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(content)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(content)

    return Handler


@contextlib.contextmanager
def hub(repos: dict[str, Repo]) -> Iterator[Hub]:
    """The stand-in on a free port of 127.0.0.1, holding `repos`."""
    stand_in = Hub("", repos)
    with serving(_handler(stand_in)) as url:
        stand_in.url = url
        yield stand_in
