"""docs/sagemaker-sdk.md as a reader runs it: `sagemaker-core` installed by the page's own
command into a virtual environment of its own, then the page's Python blocks, each as its own
program, against the session's moto server and the runtime stand-in, which forwards to the real
chat and embedding servers. What moto then holds must be what the kit's dry run of the page's
`deploy endpoint` command plans, field for field.

Three things stand between the page and the suite, each handled here and nowhere in the page:
- `sagemaker-core==2.27.0` cannot join the suite's venv: it requires `importlib-metadata<7`,
  LiteLLM 1.103.7 (the `test` extra) `>=8`, and pip refuses the pair. In a venv of its own it
  takes 422 MB and about 30 s from pip's cache.
- moto 5.2 answers `"VpcConfig": {}` and `"DataCaptureConfig": {}` in DescribeModel,
  DescribeEndpointConfig and DescribeEndpoint where SageMaker leaves them out, and the SDK's
  pydantic shapes refuse those empty structures (`Model.create` reads the model back). A front on
  moto's SageMaker API leaves them out, as SageMaker does; it changes nothing else.
- moto's list of endpoint instance types predates `ml.g5`: the page's `ml.g5.2xlarge` runs as
  `ml.g4dn.xlarge`, which has one NVIDIA GPU too, so the kit plans the same fields for both.
"""

import contextlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.deploy.deploying import NO_AWS, ROLE, deploy
from tests.project.test_docs_commands import blocks
from tests.support import processes
from tests.support.local_http import in_front_of_moto, serving
from tests.support.runtime_emulator import Runtime, runtime_emulator
from tests.support.servers import Server

PAGE = "docs/sagemaker-sdk.md"
CHAT, EMBEDDER = "qwen", "minilm"
PAGE_INSTANCE_TYPE, MOTO_INSTANCE_TYPE = "ml.g5.2xlarge", "ml.g4dn.xlarge"
# What SageMaker leaves out of an answer when the resource has none, and moto answers as {}.
LEFT_OUT_WHEN_EMPTY = ("VpcConfig", "DataCaptureConfig")
# all-MiniLM-L6-v2's embedding size.
EMBEDDING_SIZE = "384"
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Page:
    """The page's blocks: the install command, the kit's two dry runs, and the Python of the
    endpoint on instances, of the serverless one, of boto3's invoke and of the deletion."""

    install: str
    instance_plan: str
    serverless_plan: str
    instance: str
    serverless: str
    invoke: str
    delete: str


def page() -> Page:
    found = [block for block in blocks() if block.page == PAGE]
    shell = [block.body for block in found if block.lang == "sh"]
    python = [block.body for block in found if block.lang == "python"]
    assert (len(shell), len(python)) == (3, 4), f"{PAGE}'s blocks are not the ones this test runs"
    return Page(*shell, *python)


def as_sagemaker_answers(
    operation: str, params: dict[str, Any], status: int, content: bytes
) -> bytes:
    """moto's SageMaker answer, with the empty structures SageMaker leaves out left out."""
    if status != 200 or not content:
        return content
    answer = json.loads(content)
    for key in LEFT_OUT_WHEN_EMPTY:
        if answer.get(key) == {}:
            del answer[key]
    return json.dumps(answer).encode()


@dataclass(frozen=True)
class Held:
    """What moto holds of an endpoint the page made: its model, config, endpoint and their tags,
    read right after the page's block ran."""

    model: dict[str, Any]
    config: dict[str, Any]
    endpoint: dict[str, Any]
    tags: list[list[dict[str, str]]]


def held(name: str) -> Held:
    sagemaker = boto3.client("sagemaker")
    model = sagemaker.describe_model(ModelName=name)
    config = sagemaker.describe_endpoint_config(EndpointConfigName=name)
    endpoint = sagemaker.describe_endpoint(EndpointName=name)
    arns = (model["ModelArn"], config["EndpointConfigArn"], endpoint["EndpointArn"])
    tags = [sagemaker.list_tags(ResourceArn=arn)["Tags"] for arn in arns]
    return Held(model, config, endpoint, tags)


@dataclass(frozen=True)
class Ran:
    """A block's run, what moto held after it, and the runtime calls made until then."""

    done: subprocess.CompletedProcess[str]
    held: Held | None
    calls: int


@dataclass(frozen=True)
class Deployed:
    page: Page
    python: Path
    env: dict[str, str]
    runs: dict[str, Ran]


def sdk_python(install: str, directory: Path) -> Path:
    """The page's install command, run in `directory`; the Python of the venv it made."""
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    done = processes.run(["bash", "-euo", "pipefail", "-c", install], cwd=directory, env=env)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return directory / "sdk" / "bin" / "python"


def run(python: Path, program: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return processes.run([str(python), "-c", program], env=env, text=True, timeout=600)


@pytest.fixture(scope="module")
def deployed(
    aws: dict[str, str],
    chat_server: Server,
    embed_server: Server,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployed]:
    """The page's endpoints, made by its blocks: the one on instances (then boto3's invoke of
    it) and the serverless one."""
    documented = page()
    python = sdk_python(documented.install, tmp_path_factory.mktemp("sagemaker-sdk"))
    runtime = Runtime({CHAT: chat_server.url, EMBEDDER: embed_server.url})
    with contextlib.ExitStack() as stack:
        front = stack.enter_context(
            serving(in_front_of_moto(aws["AWS_ENDPOINT_URL"], as_sagemaker_answers))
        )
        emulator = stack.enter_context(runtime_emulator(runtime))
        env = {
            **os.environ,
            **aws,
            "AWS_ENDPOINT_URL_SAGEMAKER": front,
            "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": emulator,
            "SAGEMAKER_ROLE_ARN": ROLE,
        }
        instance = documented.instance.replace(PAGE_INSTANCE_TYPE, MOTO_INSTANCE_TYPE)
        runs: dict[str, Ran] = {}
        for block, program, name in (
            ("instance", instance, CHAT),
            ("invoke", documented.invoke, None),
            ("serverless", documented.serverless, EMBEDDER),
        ):
            done = run(python, program, env)
            found = held(name) if name and done.returncode == 0 else None
            runs[block] = Ran(done, found, runtime.calls)
        yield Deployed(documented, python, env, runs)


def planned(command: str) -> dict[str, dict[str, Any]]:
    """The kit's dry run of the page's `vllm-sagemaker deploy endpoint` command, by operation."""
    args = shlex.split(command.replace("\\\n", " "))
    assert args[:2] == ["vllm-sagemaker", "deploy"] and "--dry-run" in args, command
    done = deploy(*args[2:], env={**NO_AWS, "SAGEMAKER_ROLE_ARN": ROLE})
    assert done.returncode == 0, done.stderr
    return {call["operation"]: call["params"] for call in json.loads(done.stdout)}


def assert_as_planned(found: Held, plan: dict[str, dict[str, Any]], **variant: Any) -> None:
    """moto holds what the plan creates: the model's image, environment and role, the variant
    (with `variant`'s fields as moto must hold them), the endpoint's config, and the tags."""
    model, config = plan["CreateModel"], plan["CreateEndpointConfig"]
    assert found.model["PrimaryContainer"] == model["PrimaryContainer"]
    assert found.model["ExecutionRoleArn"] == model["ExecutionRoleArn"] == ROLE
    assert found.config["ProductionVariants"] == [
        {**planned_variant, **variant} for planned_variant in config["ProductionVariants"]
    ]
    assert found.endpoint["EndpointConfigName"] == plan["CreateEndpoint"]["EndpointConfigName"]
    tags = [model["Tags"], config["Tags"], plan["CreateEndpoint"]["Tags"]]
    assert found.tags == tags


def test_an_endpoint_on_instances_is_the_kits(deployed: Deployed) -> None:
    """The endpoint on instances has the kit's model environment (the model, vLLM's option, the
    metrics' dimensions), its variant (the 1800 s start-up timeouts, the inference AMI) and its
    tags; invoked through the SDK and through boto3, the chat model answers."""
    ran = deployed.runs["instance"]
    assert ran.done.returncode == 0, ran.done.stderr
    assert ran.held is not None and ran.calls == 1
    plan = planned(deployed.page.instance_plan)
    assert_as_planned(ran.held, plan, InstanceType=MOTO_INSTANCE_TYPE)
    invoked = deployed.runs["invoke"]
    assert invoked.done.returncode == 0, invoked.done.stderr
    assert json.loads(invoked.done.stdout)["choices"][0]["message"]["content"]
    assert invoked.calls == 2


def test_a_serverless_endpoint_is_the_kits(deployed: Deployed) -> None:
    """The serverless endpoint, its config made with boto3 (sagemaker-core issue 225), has the
    kit's model environment (SAGEMAKER_SERVERLESS among it), its ServerlessConfig and no
    instance fields, and its tags; the embedder answers with one embedding."""
    ran = deployed.runs["serverless"]
    assert ran.done.returncode == 0, ran.done.stderr
    assert ran.held is not None and ran.calls == 3
    assert ran.done.stdout.splitlines()[-1] == EMBEDDING_SIZE
    assert_as_planned(ran.held, planned(deployed.page.serverless_plan))


def test_the_deletion_removes_both(deployed: Deployed) -> None:
    """The page's deletion leaves moto holding neither endpoint, config nor model."""
    done = run(deployed.python, deployed.page.delete, deployed.env)
    assert done.returncode == 0, done.stderr
    sagemaker = boto3.client("sagemaker")
    for name in (CHAT, EMBEDDER):
        with pytest.raises(ClientError):
            sagemaker.describe_endpoint(EndpointName=name)
        with pytest.raises(ClientError):
            sagemaker.describe_endpoint_config(EndpointConfigName=name)
        with pytest.raises(ClientError):
            sagemaker.describe_model(ModelName=name)
