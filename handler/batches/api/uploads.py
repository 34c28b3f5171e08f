"""A `multipart/form-data` upload streamed from ASGI into a file on disk, never whole in memory.

Parts may come in any order. Small form fields are collected (at most MAX_FIELDS of
MAX_FIELD_BYTES each); the one part with a filename is written to `destination` as it arrives,
and refused with 413 as soon as it passes the size limit. `check_file` sees the file part's name
before any of its bytes are written, so a bad upload is refused before it is stored.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.types import Receive

from vllm_sagemaker.core.config import MIB
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.records.messages import ClientGone

MAX_FIELDS = 16
MAX_FIELD_BYTES = 64 * 1024


@dataclass
class Upload:
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    size: int = 0


def boundary(content_type: str | None) -> bytes:
    """The boundary of a multipart/form-data Content-Type, or a 400 that says what is wrong."""
    kind, params = parse_options_header(content_type or "")
    if kind != b"multipart/form-data" or not params.get(b"boundary"):
        raise RequestError(
            400,
            "upload the file as multipart/form-data with the fields 'purpose' and 'file'",
            "invalid_content_type",
        )
    return params[b"boundary"]


class _Parts:
    """The parser's callbacks: collect fields, write the file part."""

    def __init__(
        self,
        destination: Path,
        max_file_bytes: int,
        check_file: Callable[[str, dict[str, str]], None],
    ) -> None:
        self.destination = destination
        self.max_file_bytes = max_file_bytes
        self.check_file = check_file
        self.upload = Upload()
        self.header_name = b""
        self.header_value = b""
        self.headers: dict[bytes, bytes] = {}
        self.name = ""
        self.value = bytearray()
        self.out: BinaryIO | None = None

    def on_part_begin(self) -> None:
        self.headers, self.name, self.value = {}, "", bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        self.headers[self.header_name.lower()] = self.header_value
        self.header_name, self.header_value = b"", b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        self.name = options.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" not in options:
            if len(self.upload.fields) >= MAX_FIELDS:
                raise RequestError(400, f"more than {MAX_FIELDS} form fields", "too_many_fields")
            return
        if self.name != "file" or self.out is not None:
            raise RequestError(
                400, "send exactly one file, in the form field 'file'", "invalid_file", "file"
            )
        filename = Path(options[b"filename"].decode("utf-8", "replace")).name
        self.check_file(filename, self.upload.fields)
        self.upload.filename = filename
        self.out = self.destination.open("wb")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.out is not None and self.upload.filename is not None and not self.out.closed:
            self.upload.size += end - start
            if self.upload.size > self.max_file_bytes:
                raise RequestError(
                    413,
                    f"the file is larger than {self.max_file_bytes // MIB} MiB",
                    "file_too_large",
                    "file",
                )
            self.out.write(data[start:end])
            return
        self.value += data[start:end]
        if len(self.value) > MAX_FIELD_BYTES:
            raise RequestError(400, f"the form field {self.name!r} is too long", "field_too_long")

    def on_part_end(self) -> None:
        if self.out is not None and not self.out.closed:
            self.out.close()
        elif self.name:
            self.upload.fields[self.name] = self.value.decode("utf-8", "replace")


async def receive_upload(
    receive: Receive,
    content_type: str | None,
    destination: Path,
    max_file_bytes: int,
    check_file: Callable[[str, dict[str, str]], None],
) -> Upload:
    """Read the whole multipart body, writing its file part to `destination`. On any error the
    partial file is removed and the error raised (RequestError, ClientGone, OSError)."""
    parts = _Parts(destination, max_file_bytes, check_file)
    parser = MultipartParser(boundary(content_type), _callbacks(parts))  # type: ignore[arg-type]
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            _write(parser, message.get("body", b""))
            if not message.get("more_body", False):
                break
        _write(parser, None)
        if parts.out is None:
            raise RequestError(
                400, "Missing required parameter: 'file'.", "missing_required_parameter", "file"
            )
        if not parts.out.closed:
            raise RequestError(400, "the multipart body ends inside the file", "invalid_file")
        return parts.upload
    except BaseException:
        if parts.out is not None:
            parts.out.close()
        destination.unlink(missing_ok=True)
        raise


def _write(parser: MultipartParser, chunk: bytes | None) -> None:
    """Feed the parser (None: the end); a malformed body is a 400."""
    try:
        if chunk is None:
            parser.finalize()
        else:
            parser.write(chunk)
    except MultipartParseError as error:
        raise RequestError(
            400, f"the multipart body is malformed: {error}", "invalid_multipart"
        ) from None


def _callbacks(parts: _Parts) -> dict[str, Callable[..., None]]:
    names = (
        "on_part_begin",
        "on_header_field",
        "on_header_value",
        "on_header_end",
        "on_headers_finished",
        "on_part_data",
        "on_part_end",
    )
    return {name: getattr(parts, name) for name in names}
