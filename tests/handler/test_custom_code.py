"""Customer code beside the model, on real engines: handlers replacing /ping and /invocations in
MHCS's priority order, a handler that runs our record pipeline, customer middlewares and
formatters on our routes, requirements.txt installed offline before the server starts, and bad
handler specs or requirements stopping start-up with a clear message."""

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.container.test_serve import run_serve
from tests.support import model_factory, processes, servers

PACKAGE = "vllm-sagemaker-testpkg"

# Every script answers with who answered, so each test reads the winner from the body.
HEADER = """
import json

import model_hosting_container_standards.sagemaker as sagemaker_standards
from fastapi import Request

from vllm_sagemaker.handler.sagemaker.custom_code import invoke
"""
# env ping (beating a decorator and a function); invocations by a function that runs our
# pipeline on a JSON Lines body it builds; a package from requirements.txt.
ENV_PING = """
import vllm_sagemaker_testpkg


def ping_from_env():
    return {"answered_by": "env", "package": vllm_sagemaker_testpkg.VALUE}


@sagemaker_standards.custom_ping_handler
async def decorated_ping():
    return {"answered_by": "decorator"}


def custom_sagemaker_ping_handler():
    return {"answered_by": "function"}


async def custom_sagemaker_invocation_handler(request: Request):
    texts = (await request.json())["texts"]
    lines = "\\n".join(json.dumps({"input": text}) for text in texts)
    answer = await invoke(request, lines.encode(), "application/jsonlines")
    body = b"".join([chunk async for chunk in answer.body_iterator])
    return {
        "answered_by": "function",
        "status": answer.status_code,
        "content_type": answer.headers["content-type"],
        "lines": [json.loads(line) for line in body.splitlines()],
    }
"""
# decorator ping (beating a function); env invocations (beating a decorator and a function).
DECORATOR_PING = """
@sagemaker_standards.custom_ping_handler
async def decorated_ping():
    return {"answered_by": "decorator"}


def custom_sagemaker_ping_handler():
    return {"answered_by": "function"}


async def invocations_from_env(request: Request):
    return {"answered_by": "env"}


@sagemaker_standards.custom_invocation_handler
async def decorated_invocations(request: Request):
    return {"answered_by": "decorator"}


async def custom_sagemaker_invocation_handler(request: Request):
    return {"answered_by": "function"}
"""
# function ping; decorator invocations (beating a function) that passes the request through.
FUNCTION_PING = """
def custom_sagemaker_ping_handler():
    return {"answered_by": "function"}


@sagemaker_standards.custom_invocation_handler
async def decorated_invocations(request: Request):
    return await invoke(request)


async def custom_sagemaker_invocation_handler(request: Request):
    return {"answered_by": "function"}
"""
SCRIPTS = {
    "env_ping.py": ENV_PING,
    "decorator_ping.py": DECORATOR_PING,
    "fn_ping.py": FUNCTION_PING,
}


@pytest.fixture(scope="module")
def code_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The customer's directory: three scripts, requirements.txt and its wheel directory. The
    package is not installed before the servers start, and is removed after."""
    root = tmp_path_factory.mktemp("customer-code")
    for name, body in SCRIPTS.items():
        (root / name).write_text(HEADER + textwrap.dedent(body))
    (root / "requirements.txt").write_text(f"{PACKAGE}==1.0\n")
    model_factory.make_wheel(root / "requirements", PACKAGE, "1.0", 'VALUE = "installed offline"\n')
    uninstall = [sys.executable, "-m", "pip", "uninstall", "-y", "-q", PACKAGE]
    assert processes.run(uninstall).returncode == 0
    yield root
    assert processes.run(uninstall).returncode == 0


@pytest.fixture(scope="module")
def custom(
    code_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, servers.Server]]:
    """Three embedders, one per script; only the first installs the requirements."""
    model = model_factory.embedder_path()
    no_install = {"STANDARD_AUTO_INSTALL_REQ": "false"}
    env = {
        "env_ping": {"CUSTOM_FASTAPI_PING_HANDLER": "env_ping.py:ping_from_env"},
        "decorator_ping": {
            **no_install,
            "CUSTOM_FASTAPI_INVOCATION_HANDLER": "model:invocations_from_env",
        },
        "fn_ping": no_install,
    }
    for name in env:
        env[name].update(SAGEMAKER_MODEL_PATH=str(code_dir), CUSTOM_SCRIPT_FILENAME=f"{name}.py")
    with servers.running(
        dict.fromkeys(env, model), tmp_path_factory.mktemp("custom"), env
    ) as running:
        yield running


def answer(server: servers.Server, method: str, path: str, **kwargs: object) -> dict:
    reply = httpx.request(method, server.url + path, timeout=60, **kwargs)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize(
    ("server", "ping", "invocations"),
    [
        ("env_ping", "env", "function"),
        ("decorator_ping", "decorator", "env"),
        ("fn_ping", "function", "decorator"),
    ],
)
def test_customer_handlers_win_in_mhcs_order(
    custom: dict[str, servers.Server], server: str, ping: str, invocations: str
) -> None:
    """env > decorator > function > ours, for /ping and for /invocations; a script with both a
    decorator and a function is answered by the decorator, as on vLLM's own image. The log
    says which handlers replaced ours."""
    running = custom[server]
    assert answer(running, "GET", "/ping")["answered_by"] == ping
    reply = answer(running, "POST", "/invocations", json={"texts": ["a"], "input": "a"})
    if invocations == "decorator":
        # fn_ping's decorated handler passes the request to our pipeline: an embedding.
        assert reply["object"] == "list"
        assert len(reply["data"][0]["embedding"]) == 384
    else:
        assert reply["answered_by"] == invocations
    log = running.log_path.read_text()
    assert "/ping answered by" in log
    assert "/ping answered by vllm-sagemaker" not in log
    assert "/invocations answered by vllm-sagemaker" not in log


def test_a_customer_handler_runs_our_pipeline_one_line_per_record(
    custom: dict[str, servers.Server],
) -> None:
    """The handler turns {"texts": [...]} into a JSON Lines body and calls invoke(): one JSON line
    per record, in order, a bad record answered with an error line and the rest kept."""
    texts = ["one", "two", {"not": "text"}, "four"]
    reply = answer(custom["env_ping"], "POST", "/invocations", json={"texts": texts})
    assert reply["status"] == 200
    assert reply["content_type"].startswith("application/jsonlines")
    lines = reply["lines"]
    assert len(lines) == len(texts)
    for index, line in enumerate(lines):
        if isinstance(texts[index], str):
            assert len(line["data"][0]["embedding"]) == 384, line
    assert [("error" in line) for line in lines] == [isinstance(t, dict) for t in texts]


def test_requirements_are_installed_offline_before_the_server_starts(
    custom: dict[str, servers.Server],
) -> None:
    """The script imports a package that only requirements.txt + requirements/ provide."""
    assert answer(custom["env_ping"], "GET", "/ping")["package"] == "installed offline"
    log = custom["env_ping"].log_path.read_text()
    assert "--no-index --find-links" in log
    assert f"Successfully installed {PACKAGE}-1.0" in log


def test_a_broken_requirement_stops_start_up_with_pips_message(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("vllm-sagemaker-missing==9.9\n")
    (tmp_path / "requirements").mkdir()
    result = run_serve(
        SM_VLLM_MODEL=str(model_factory.embedder_path()), SAGEMAKER_MODEL_PATH=str(tmp_path)
    )
    assert result.returncode == 1
    assert "No matching distribution found for vllm-sagemaker-missing==9.9" in result.stderr
    assert "installing the requirements failed" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("model.py:no_such_function", "defines no 'no_such_function'"),
        ("missing.py:handler", "there is no file"),
        ("model.py", "names no function"),
    ],
)
def test_a_bad_handler_spec_stops_start_up_before_the_engine(
    tmp_path: Path, spec: str, message: str
) -> None:
    (tmp_path / "model.py").write_text("def handler():\n    return {}\n")
    result = run_serve(
        SM_VLLM_MODEL=str(model_factory.embedder_path()),
        SAGEMAKER_MODEL_PATH=str(tmp_path),
        CUSTOM_FASTAPI_INVOCATION_HANDLER=spec,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "CUSTOM_FASTAPI_INVOCATION_HANDLER" in result.stderr


def test_customer_middlewares_and_formatters_reach_our_routes(embed_server: servers.Server) -> None:
    """The embed server's script registers a throttle middleware and input/output formatters
    (conftest.CUSTOMER_MIDDLEWARES): the throttle wraps our /ping and /invocations, the
    formatters see the request our /invocations sends to vLLM."""
    ping = httpx.get(embed_server.url + "/ping", timeout=60)
    assert ping.status_code == 200
    assert ping.headers["x-customer-throttle"] == "GET /ping"
    reply = httpx.post(embed_server.url + "/invocations", json={"input": "hello"}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-customer-throttle"] == "POST /invocations"
    assert reply.headers["x-customer-formatted"] == "POST /v1/embeddings"
    refused = httpx.post(
        embed_server.url + "/invocations",
        json={"input": "hello"},
        headers={"x-customer-throttle": "refuse"},
        timeout=60,
    )
    assert refused.status_code == 429
    assert refused.json() == {"refused_by": "customer throttle"}
