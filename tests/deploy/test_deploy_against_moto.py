"""`vllm-sagemaker deploy` run for real against moto: an endpoint made and deleted, a
transform's input cut into one shard per instance, sync, streamed and async invocations, and the
cpu image found in ECR when no --image is given."""

import json

import boto3

from tests.deploy.deploying import ROLE, deploy, model_options, plan, put_image
from tests.support import cli


def test_endpoint_then_delete_against_moto(aws: dict[str, str]) -> None:
    env = {"SAGEMAKER_ROLE_ARN": ROLE}
    created = deploy("endpoint", *model_options("llm", "ml.p3.8xlarge"), env=env)
    assert created.returncode == 0, created.stderr
    # One line per state change of the wait (moto's endpoint is InService at once).
    assert [line for line in created.stderr.splitlines() if "InService" in line] == [
        "deploy: endpoint llm: InService"
    ]
    sagemaker = boto3.client("sagemaker")
    assert sagemaker.describe_endpoint(EndpointName="llm")["EndpointStatus"] == "InService"
    model = sagemaker.describe_model(ModelName="llm")["PrimaryContainer"]
    assert model["Environment"]["SM_VLLM_TENSOR_PARALLEL_SIZE"] == "4"
    deleted = deploy("delete", "--name", "llm", env=env)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stderr.splitlines() == [
        "deploy: removed endpoint llm",
        "deploy: removed endpoint config llm",
        "deploy: removed model llm",
    ]
    # The moto server is the session's: other tests' deployments may stand beside this one.
    assert "llm" not in [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]
    configs = sagemaker.list_endpoint_configs()["EndpointConfigs"]
    assert "llm" not in [c["EndpointConfigName"] for c in configs]
    assert "llm" not in [m["ModelName"] for m in sagemaker.list_models()["Models"]]


def test_transform_cuts_one_file_into_three_shards_for_three_instances(aws: dict[str, str]) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="jobs-data")
    lines = [json.dumps({"custom_id": f"r{i}", "prompt": f"p{i}"}).encode() for i in range(300)]
    s3.put_object(Bucket="jobs-data", Key="in/requests.jsonl", Body=b"\n".join(lines) + b"\n")
    arguments = model_options(
        "job",
        "ml.p3.2xlarge",
        instance_count="3",
        input="s3://jobs-data/in/",
        output="s3://jobs-data/out/",
    )
    done = deploy("transform", *arguments, env={"SAGEMAKER_ROLE_ARN": ROLE})
    assert done.returncode == 0, done.stderr
    job = boto3.client("sagemaker").describe_transform_job(TransformJobName="job")
    prefix = job["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"]
    assert prefix == "s3://jobs-data/out-parts/job/"
    keys = sorted(
        o["Key"]
        for o in s3.list_objects_v2(Bucket="jobs-data", Prefix="out-parts/job/")["Contents"]
    )
    assert len(keys) >= 3
    joined = b"".join(s3.get_object(Bucket="jobs-data", Key=k)["Body"].read() for k in keys)
    assert joined.splitlines() == lines
    assert done.stdout.splitlines() == [
        f"s3://jobs-data/out/{key.removeprefix('out-parts/job/')}.out" for key in keys
    ]


def test_invoke_against_moto(aws: dict[str, str]) -> None:
    done = deploy("invoke", "--name", "any", "--body", '{"prompt": "hi"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    planned = plan("invoke", "--name", "llm", "--body", '{"prompt": "hi"}', "--stream")
    assert planned == [
        {
            "service": "sagemaker-runtime",
            "operation": "InvokeEndpointWithResponseStream",
            "params": {
                "EndpointName": "llm",
                "ContentType": "application/json",
                "Body": '{"prompt": "hi"}',
            },
        }
    ]


def test_an_endpoint_on_a_cpu_instance_takes_the_cpu_image(aws: dict[str, str]) -> None:
    """No --image: the endpoint takes vllm-sagemaker:cpu, which `deploy image --target cpu`
    pushed, and no GPU setting; with no image of that tag, one line says which to build."""
    uri = put_image("vllm-sagemaker", "cpu")
    # moto knows the instance types of 2020 only: no ml.c7i.
    options = cli.options(name="cpu-llm", model_id="org/m", instance_type="ml.c5.4xlarge")
    done = deploy("endpoint", *options, "--no-wait", env={"SAGEMAKER_ROLE_ARN": ROLE})
    assert done.returncode == 0, done.stderr
    assert f"deploy: image: {uri} (no --image given)" in done.stderr.splitlines()
    sagemaker = boto3.client("sagemaker")
    container = sagemaker.describe_model(ModelName="cpu-llm")["PrimaryContainer"]
    assert container["Image"] == uri
    assert container["Environment"] == {
        "HF_MODEL_ID": "org/m",
        "SAGEMAKER_METRICS_ENDPOINT_NAME": "cpu-llm",
        "SAGEMAKER_METRICS_VARIANT_NAME": "AllTraffic",
    }
    config = sagemaker.describe_endpoint_config(EndpointConfigName="cpu-llm")
    (variant,) = config["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c5.4xlarge" and "InferenceAmiVersion" not in variant
    assert deploy("delete", "--name", "cpu-llm").returncode == 0

    on_gpu = cli.options(name="gpu-llm", model_id="org/m", instance_type="ml.g5.2xlarge")
    missing = deploy("endpoint", *on_gpu, "--dry-run", env={"SAGEMAKER_ROLE_ARN": ROLE})
    assert (missing.returncode, missing.stdout) == (1, "")
    (told,) = missing.stderr.splitlines()
    assert told.startswith("deploy: no --image given, and ECR's vllm-sagemaker in us-east-1 holds")
    assert told.endswith("run `vllm-sagemaker deploy image --target gpu` first, or give --image")


def test_async_endpoint_and_invocation_against_moto(aws: dict[str, str]) -> None:
    boto3.client("s3").create_bucket(Bucket="async-results")
    created = deploy(
        "endpoint",
        *model_options("async-llm", "ml.p3.2xlarge", async_output="s3://async-results/out/"),
        env={"SAGEMAKER_ROLE_ARN": ROLE},
    )
    assert created.returncode == 0, created.stderr
    config = boto3.client("sagemaker").describe_endpoint_config(EndpointConfigName="async-llm")
    assert (
        config["AsyncInferenceConfig"]["OutputConfig"]["S3OutputPath"] == "s3://async-results/out/"
    )
    done = deploy("invoke", "--name", "async-llm", "--async", "--body", '{"prompt": "hi"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("s3://")
    inputs = boto3.client("s3").list_objects_v2(Bucket="async-results", Prefix="out/inputs/")
    (uploaded,) = inputs["Contents"]
    body = boto3.client("s3").get_object(Bucket="async-results", Key=uploaded["Key"])["Body"]
    assert body.read() == b'{"prompt": "hi"}'
    assert deploy("delete", "--name", "async-llm").returncode == 0
