"""SageMaker's OpenAI-compatible path: real OpenAI clients (the `openai` SDK, LiteLLM) through the
runtime emulator's `/endpoints/<name>/openai/v1/chat/completions`, with a bearer token made by
`deploy token` (or its module) and checked by the emulator; whatever `model` the client sends."""

import asyncio
import base64
import datetime
import json
from collections.abc import Iterator
from typing import Any

import botocore.auth
import httpx
import litellm
import openai
import pytest
from botocore.credentials import ReadOnlyCredentials

from tests.conftest import LITELLM_MODEL
from tests.support import cli
from tests.support.aws import REGION, moto_endpoint
from tests.support.runtime_emulator import Runtime, presigned_query, runtime_emulator
from tests.support.servers import Server
from vllm_sagemaker.core import model_names
from vllm_sagemaker.core.model_names import Models
from vllm_sagemaker.deploy.kit import token
from vllm_sagemaker.deploy.kit.plans import openai_path

MESSAGES = [{"role": "user", "content": "Hello there"}]
ASK: dict[str, Any] = {"messages": MESSAGES, "max_tokens": 6, "temperature": 0}


@pytest.mark.parametrize(
    ("record", "models", "expected"),
    [
        ({"model": "gpt-4o"}, Models(("chat", "alias"), frozenset({"a1"})), "chat"),
        ({"model": "my-endpoint"}, Models(("chat",)), "chat"),
        ({"model": "alias"}, Models(("chat", "alias")), None),
        ({"model": "chat"}, Models(("chat",)), None),
        ({"model": "a1"}, Models(("chat",), frozenset({"a1"})), None),
        ({"model": ""}, Models(("chat",)), None),
        ({}, Models(("chat",)), None),
        ({"model": 7}, Models(("chat",)), None),
        (["not", "a", "body"], Models(("chat",)), None),
        ({"model": "gpt-4o"}, Models(()), None),
    ],
)
def test_which_model_answers(record: Any, models: Models, expected: str | None) -> None:
    """A name the server knows answers as it is; no name is vLLM's default; any other name is
    the first served name."""
    assert model_names.answering(model_names.asked(record), models) == expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("12h", 43200),
        ("90m", 5400),
        ("600s", 600),
        ("600", 600),
        (" 30M ", 1800),
        ("13h", None),
        ("43201", None),
        ("0", None),
        ("1d", None),
        ("", None),
    ],
)
def test_token_lifetimes(text: str, seconds: int | None) -> None:
    assert token.duration_s(text) == seconds


def test_a_token_is_the_sdks_presigned_url() -> None:
    """`sagemaker-api-key-` + base64 of the presigned CallWithBearerToken URL without its
    scheme, `host` the only signed header, `&Version=1` after the signature."""
    made = key(expires_s=3600)
    url = base64.b64decode(made.removeprefix(openai_path.PREFIX)).decode()
    assert url.startswith("sagemaker.amazonaws.com/?Action=CallWithBearerToken&X-Amz-Algorithm=")
    assert url.endswith("&Version=1")
    query = presigned_query(made)
    assert query is not None
    assert query["X-Amz-Credential"].endswith(f"/{REGION}/sagemaker/aws4_request")
    assert (query["X-Amz-Expires"], query["X-Amz-SignedHeaders"]) == ("3600", "host")
    assert presigned_query("sagemaker-api-key-%%%") is None
    assert presigned_query("sk-openai-key") is None


def key(expires_s: int = 600, region: str = REGION, secret: str = "testing") -> str:
    return openai_path.token(ReadOnlyCredentials("testing", secret, "testing"), region, expires_s)


@pytest.fixture(scope="module")
def openai_runtime(
    chat_server: Server, platform_server: Server, aws: dict[str, str]
) -> Iterator[tuple[str, str]]:
    """Endpoints in moto served through the emulator: one by the chat container, one by the
    platform container (SAGEMAKER_MODEL_FALLBACK=false); the chat one's name, the runtime URL."""
    with moto_endpoint("chat") as name:
        runtime = Runtime(
            {name: chat_server.url, "strict": platform_server.url},
            secrets={aws["AWS_ACCESS_KEY_ID"]: aws["AWS_SECRET_ACCESS_KEY"]},
            region=REGION,
        )
        with runtime_emulator(runtime) as url:
            yield name, url


def client(runtime: tuple[str, str], endpoint: str | None = None) -> openai.OpenAI:
    name, url = runtime
    return openai.OpenAI(base_url=openai_path.base_url(url, endpoint or name), api_key=key())


def test_any_model_name_is_answered_by_the_served_model(
    openai_runtime: tuple[str, str], chat_server: Server, models: dict[str, Any]
) -> None:
    """The endpoint's name, `gpt-4o` and the served name get 200 from the OpenAI SDK, with no
    extra header; the answer names the model that answered."""
    sdk = client(openai_runtime)
    served = str(models["chat"])
    for asked, answered in [
        (openai_runtime[0], served),
        ("gpt-4o", served),
        (served, served),
        (LITELLM_MODEL, served),  # vLLM names every answer of the base model by its first name
    ]:
        completion = sdk.chat.completions.create(model=asked, **ASK)
        assert completion.model == answered, asked
        assert completion.choices[0].message.content


def test_an_adapters_name_is_answered_by_the_adapter(
    openai_runtime: tuple[str, str], chat_server: Server
) -> None:
    completion = client(openai_runtime).chat.completions.create(model="a1", **ASK)
    direct = httpx.post(
        chat_server.url + "/v1/chat/completions", json={**ASK, "model": "a1"}, timeout=120
    ).json()
    assert completion.model == "a1"
    assert completion.choices[0].message.content == direct["choices"][0]["message"]["content"]


def test_streaming_yields_chunks_then_done(openai_runtime: tuple[str, str]) -> None:
    name, url = openai_runtime
    with httpx.stream(
        "POST",
        openai_path.base_url(url, name) + "/chat/completions",
        json={**ASK, "model": "gpt-4o", "stream": True},
        headers={"Authorization": f"Bearer {key()}"},
        timeout=120,
    ) as reply:
        assert reply.status_code == 200
        events = [line for line in reply.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert len(chunks) > 2
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    with client(openai_runtime).chat.completions.create(model=name, stream=True, **ASK) as stream:
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text


def test_the_async_sdk(openai_runtime: tuple[str, str]) -> None:
    name, url = openai_runtime

    async def ask() -> list[str]:
        sdk = openai.AsyncOpenAI(base_url=openai_path.base_url(url, name), api_key=key())
        answers = await asyncio.gather(
            *(sdk.chat.completions.create(model=m, **ASK) for m in (name, "gpt-4o", "a1"))
        )
        return [answer.model for answer in answers]

    models = asyncio.run(ask())
    assert models[2] == "a1" and models[0] == models[1] != "a1"


@pytest.mark.parametrize(
    ("given", "status"),
    [
        (None, 401),
        ("not-a-token", 403),
        ({"secret": "wrong"}, 403),
        ({"region": "eu-west-1"}, 403),
        ({"expires_s": 1, "signed_ago_s": 5}, 403),
    ],
)
def test_a_request_without_a_valid_token_is_refused(
    openai_runtime: tuple[str, str],
    given: str | dict[str, Any] | None,
    status: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No token is the emulator's 401; a token that is not one, signed with another secret,
    for another region or expired is 403, each in OpenAI's error shape."""
    name, url = openai_runtime
    if isinstance(given, dict):
        ago = given.pop("signed_ago_s", 0)
        signed_at = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=ago)
        monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: signed_at)
        given = key(**given)
    headers = {"Authorization": f"Bearer {given}"} if given else {}
    reply = httpx.post(
        openai_path.base_url(url, name) + "/chat/completions",
        json={**ASK, "model": "gpt-4o"},
        headers=headers,
        timeout=60,
    )
    assert reply.status_code == status
    assert set(reply.json()["error"]) >= {"message", "type", "code"}


def test_strict_model_names_get_vllms_404(openai_runtime: tuple[str, str]) -> None:
    """SAGEMAKER_MODEL_FALLBACK=false: an unknown `model` is vLLM's 404, in OpenAI's shape."""
    with pytest.raises(openai.NotFoundError) as refused:
        client(openai_runtime, "strict").chat.completions.create(model="gpt-4o", **ASK)
    error = refused.value.body
    assert isinstance(error, dict) and "gpt-4o" in error["message"]
    assert refused.value.status_code == 404


def test_invocations_and_direct_routes_take_any_model(
    chat_server: Server, models: dict[str, Any]
) -> None:
    """The container's side of every form the OpenAI path may take: `/invocations`,
    `/v1/chat/completions` and `/openai/v1/chat/completions`, streamed or not."""
    served = str(models["chat"])
    for path in ("/invocations", "/v1/chat/completions", "/openai/v1/chat/completions"):
        answer = httpx.post(chat_server.url + path, json={**ASK, "model": "gpt-4o"}, timeout=120)
        assert (answer.status_code, answer.json()["model"]) == (200, served), path
        streamed = httpx.post(
            chat_server.url + path, json={**ASK, "model": "gpt-4o", "stream": True}, timeout=120
        )
        assert streamed.status_code == 200, path
        assert streamed.text.rstrip().endswith("data: [DONE]"), path
        assert f'"model":"{served}"' in streamed.text.replace(" ", ""), path


@pytest.mark.parametrize("path", ["/invocations", "/v1/completions", "/v1/embeddings"])
def test_other_kinds_take_any_model_too(
    path: str, chat_server: Server, embed_server: Server, models: dict[str, Any]
) -> None:
    """A completion and an embedding naming a model the server does not serve."""
    completion = path != "/v1/embeddings"
    server = chat_server if completion else embed_server
    body = {"prompt": "The quick", "max_tokens": 4} if completion else {"input": "a line"}
    answer = httpx.post(server.url + path, json={**body, "model": "gpt-4o"}, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == str(models["chat" if completion else "embed"])


def test_deploy_token_gives_what_an_openai_client_needs(
    openai_runtime: tuple[str, str], aws: dict[str, str]
) -> None:
    name, url = openai_runtime
    env = {"AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url}
    made = cli.run("deploy", "token", "--name", name, "--json", env=env, text=True)
    assert made.returncode == 0, made.stderr
    access = json.loads(made.stdout)
    assert access["base_url"] == openai_path.base_url(url, name)
    assert access["api_key"].startswith(openai_path.PREFIX)
    sdk = openai.OpenAI(base_url=access["base_url"], api_key=access["api_key"])
    assert sdk.chat.completions.create(model=name, **ASK).choices[0].message.content
    shell = cli.run("deploy", "token", "--name", name, "--expires", "30m", env=env, text=True)
    lines = shell.stdout.splitlines()
    assert [line.split("=", 1)[0] for line in lines] == [
        "export OPENAI_BASE_URL",
        "export OPENAI_API_KEY",
    ]
    query = presigned_query(lines[1].split("=", 1)[1])
    assert query is not None and query["X-Amz-Expires"] == "1800"
    dry = cli.run("deploy", "token", "--name", name, "--dry-run", env=env, text=True)
    assert dry.stdout == f"export OPENAI_BASE_URL={openai_path.base_url(url, name)}\n"
    missing = cli.run("deploy", "token", "--name", "no-such-endpoint", env=env, text=True)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1].endswith("does not exist in us-east-1")
    wrong = cli.run("deploy", "token", "--name", name, "--expires", "13h", env=env, text=True)
    assert wrong.returncode == 2 and "--expires" in wrong.stderr


def test_deploy_invoke_openai(openai_runtime: tuple[str, str]) -> None:
    name, url = openai_runtime
    env = {"AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url}
    body = json.dumps({**ASK, "model": "gpt-4o"})
    sent = cli.run("deploy", "invoke", "--name", name, "--openai", "--body", body, env=env)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["choices"][0]["message"]["content"]
    streamed = cli.run(
        "deploy", "invoke", "--name", name, "--openai", "--stream", "--body", body, env=env
    )
    assert streamed.returncode == 0 and streamed.stdout.strip()
    refused = cli.run("deploy", "invoke", "--name", "strict", "--openai", "--body", body, env=env)
    assert refused.returncode == 1
    (line,) = refused.stderr.decode().splitlines()
    assert "answered 404" in line and "gpt-4o" in line


def test_litellm_reaches_the_endpoint_as_an_openai_server(openai_runtime: tuple[str, str]) -> None:
    """A gateway library: LiteLLM's OpenAI provider, pointed at the endpoint's base URL."""
    name, url = openai_runtime
    answer = litellm.completion(
        model=f"openai/{name}",
        api_base=openai_path.base_url(url, name),
        api_key=key(),
        **ASK,
    )
    assert answer.choices[0].message.content
