"""The model's files and config where they are, for the fit check (`container.memory`): a model
directory, the Hugging Face Hub (`HF_MODEL_ID`, a model id), or the object store its weights
stream from (`s3://`).

`serve` reads them before vLLM starts, so a model too big for the container's memory stops it at
once instead of downloading and being killed mid-start. Only metadata and the small JSON files
are read: the Hub's model info with its files' sizes (`HfApi.model_info(files_metadata=True)`,
at HF_ENDPOINT with HF_TOKEN, as vLLM downloads) and `config.json`; an S3 prefix's listing and
its `config.json`. A read that fails is `NotRead`, in words for one line: the fit is then not
checked and vLLM starts as it would have. With HF_HUB_OFFLINE on, nothing is read from the Hub.
huggingface_hub and boto3 come with vLLM; they are imported only when a read needs them.
"""

import contextlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_sagemaker.container.memory import INDEX_FILES
from vllm_sagemaker.core.env import ConfigError

CONFIG = "config.json"
HUB = "https://huggingface.co"
# Seconds a request to the Hub or S3 may take: a start waits at most a few of them.
READ_TIMEOUT_S = 10
# huggingface_hub's spellings of "on" (constants._is_true).
ON = ("1", "on", "yes", "true")
# A Hub model id as huggingface_hub validates one (`org/name` or `name`).
REPO_ID = re.compile(r"^[\w.-]{1,96}(/[\w.-]{1,96})?$")
# Object stores the Run:ai streamer reads, of which this check reads S3.
OTHER_STORES = ("gs://", "az://")


@dataclass(frozen=True)
class Files:
    """What the check reads of a model: its config, its files' sizes (paths from its root), the
    weight files each index present names, and whether they came from the Hub."""

    config: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    indexes: dict[str, list[str]] = field(default_factory=dict)
    from_hub: bool = False


class NotRead(Exception):
    """Why the model's files could not be read (one line)."""


def where(model: str) -> str:
    """Where a model's files are: "dir" (a directory here), "s3", "store" (another object
    store), "hub" (a model id), or "path" (a path that is none of these: vLLM says so)."""
    if os.path.isdir(model):
        return "dir"
    if model.lower().startswith("s3://"):
        return "s3"
    if model.lower().startswith(OTHER_STORES):
        return "store"
    if REPO_ID.match(model) and ".." not in model and "--" not in model:
        return "hub"
    return "path"


def _json(text: str) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        loaded = json.loads(text)
        return loaded if isinstance(loaded, dict) else {}
    return {}


def _files(sizes: dict[str, int], read: Callable[[str], str], from_hub: bool = False) -> Files:
    """The config and the indexes present, read with `read` (a file's text by its path)."""
    config = _json(read(CONFIG)) if CONFIG in sizes else {}
    indexes = {}
    for name in INDEX_FILES:
        if name in sizes:
            weight_map = _json(read(name)).get("weight_map")
            if isinstance(weight_map, dict):
                indexes[name] = sorted({str(file) for file in weight_map.values()})
    return Files(config, sizes, indexes, from_hub)


def directory(path: str) -> Files:
    """A model directory's files (nothing where it cannot be read). A file this user may not
    read is a ConfigError: vLLM would fail on it later, in words that do not say why (a
    container may run under any uid, as on Serverless Inference)."""
    sizes: dict[str, int] = {}
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        sizes = {entry.name: entry.stat().st_size for entry in entries if entry.is_file()}
    unreadable = sorted(name for name in sizes if not os.access(os.path.join(path, name), os.R_OK))
    if unreadable:
        raise ConfigError(
            f"this container's user (uid {os.getuid()}) cannot read the model's "
            f"{', '.join(unreadable[:3])}{' and others' if len(unreadable) > 3 else ''} in "
            f"{path}: make the files readable by any user (chmod -R a+rX) before packing them"
        )

    def read(name: str) -> str:
        try:
            with open(os.path.join(path, name), encoding="utf-8") as file:
                return file.read()
        except (OSError, ValueError):
            return ""

    return _files(sizes, read)


def remote(env: Mapping[str, str], model: str, revision: str | None) -> Files:
    """The files of a model on the Hub or in S3; NotRead when they cannot be read."""
    kind = where(model)
    if kind == "s3":
        return s3(model)
    if kind == "store":
        raise NotRead(f"{model.split(':')[0]}:// listings are not read by this check")
    if env.get("HF_HUB_OFFLINE", "").strip().lower() in ON:
        raise NotRead("HF_HUB_OFFLINE is on, so nothing is read from the Hub")
    if env.get("VLLM_USE_MODELSCOPE", "").strip().lower() in ON:
        raise NotRead("VLLM_USE_MODELSCOPE is on: the model comes from ModelScope")
    return hub(env, model, revision)


def _line(error: BaseException) -> str:
    text = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {text}"[:300]


def hub(env: Mapping[str, str], repo: str, revision: str | None) -> Files:
    """A Hub model's files' sizes (its model info with files' metadata) and its config, at
    HF_ENDPOINT with HF_TOKEN (else the token huggingface_hub keeps), pinned to the commit the
    info names."""
    from huggingface_hub import HfApi, hf_hub_url
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    endpoint = (env.get("HF_ENDPOINT") or HUB).rstrip("/")
    token = env.get("HF_TOKEN") or None
    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(
            repo, revision=revision, files_metadata=True, timeout=READ_TIMEOUT_S
        )
        sizes = {
            sibling.rfilename: sibling.size or (sibling.lfs.size if sibling.lfs else 0)
            for sibling in info.siblings or []
        }

        def read(name: str) -> str:
            url = hf_hub_url(repo, name, revision=info.sha or revision, endpoint=endpoint)
            reply = get_session().get(
                url, headers=build_hf_headers(token=token), timeout=READ_TIMEOUT_S
            )
            hf_raise_for_status(reply)
            return str(reply.text)

        return _files(sizes, read, from_hub=True)
    except GatedRepoError:
        why = "it is gated: accept its terms on the Hub and set HF_TOKEN"
    except RepositoryNotFoundError:
        why = "no such model, or a private one this token may not read (HF_TOKEN)"
    except RevisionNotFoundError:
        why = f"it has no revision {revision}"
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else "?"
        why = f"HTTP {status}"
    except Exception as error:
        why = _line(error)
    raise NotRead(f"the Hub ({endpoint}) did not give {repo}'s files: {why}")


def s3(uri: str) -> Files:
    """The objects at an S3 prefix (not below it: the Run:ai streamer reads the prefix's own)
    and its config, with boto3's credentials and endpoint (AWS_ENDPOINT_URL, as the streamer)."""
    import boto3
    from botocore.config import Config

    bucket, _, key = uri[len("s3://") :].partition("/")
    prefix = key if not key or key.endswith("/") else key + "/"
    location = f"s3://{bucket}/{prefix}"
    try:
        client = boto3.client(
            "s3",
            config=Config(
                connect_timeout=READ_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S,
                retries={"max_attempts": 2},
            ),
        )
        sizes = {}
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, Delimiter="/"
        )
        for page in pages:
            for item in page.get("Contents", []):
                name = item["Key"][len(prefix) :]
                if name:
                    sizes[name] = int(item["Size"])

        def read(name: str) -> str:
            body = client.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()
            return bytes(body).decode("utf-8", "replace")

        files = _files(sizes, read)
    except Exception as error:
        raise NotRead(f"S3 did not list {location}: {_line(error)}") from error
    if not sizes:
        raise NotRead(f"{location} holds no files")
    return files
