"""What a failed deploy takes back (`deploy.base.run.Rollback`): what a Create made; a write (it
may have replaced something), a scaling target or policy the run replaced and an UpdateEndpoint
(with what it runs on) stay, said; and how a line names what a call touches."""

from collections.abc import Callable, Sequence

from vllm_sagemaker.deploy.base.calls import Call, Undo
from vllm_sagemaker.deploy.kit.plans import scaling

# What a call touches, by the parameter naming it, first found first (CreateEndpoint names its
# config too, CreateTransformJob its model).
_KINDS = (
    ("InferenceComponentName", "inference component"),
    ("AlarmName", "alarm"),
    ("EndpointName", "endpoint"),
    ("TransformJobName", "transform job"),
    ("EndpointConfigName", "endpoint config"),
    ("ModelName", "model"),
    ("repositoryName", "ECR repository"),
    ("ResourceId", "scalable target"),
    ("DashboardName", "dashboard"),
)
# Writes whose effect stays: what they wrote may have replaced what was there.
_WRITES = frozenset({("s3", "PutObject"), ("file", "Write")})


def touched(call: Call) -> str:
    """What a call touches, as a line names it: `model llm`, `s3://bucket/key`, a path."""
    params = call.params
    if "AlarmNames" in params:
        return "alarm " + ", ".join(params["AlarmNames"])
    if "PolicyName" in params:
        return f"scaling policy {params['PolicyName']} of {params.get('ResourceId', '')}".strip()
    for key, kind in _KINDS:
        if key in params:
            return f"{kind} {params[key]}"
    if "Bucket" in params:
        return f"s3://{params['Bucket']}/{params.get('Key', '')}"
    return str(params.get("Path", f"{call.service} {call.operation}"))


# The deletion of what a Create made: its operation and the parameter naming it. Without force:
# an ECR repository that holds an image (pushed before the failure) stays.
_DELETIONS = {
    ("sagemaker", "CreateModel"): ("DeleteModel", "ModelName"),
    ("sagemaker", "CreateEndpointConfig"): ("DeleteEndpointConfig", "EndpointConfigName"),
    ("sagemaker", "CreateEndpoint"): ("DeleteEndpoint", "EndpointName"),
    ("sagemaker", "CreateInferenceComponent"): (
        "DeleteInferenceComponent",
        "InferenceComponentName",
    ),
    ("ecr", "CreateRepository"): ("DeleteRepository", "repositoryName"),
}
_SCALING_PUTS = ("RegisterScalableTarget", "PutScalingPolicy")


def _deletion(call: Call) -> Call | None:
    if (call.service, call.operation) in _DELETIONS:
        operation, key = _DELETIONS[call.service, call.operation]
        return Call(call.service, operation, {key: call.params[key]})
    if call.service == scaling.SERVICE and call.operation in _SCALING_PUTS:
        return scaling.deletion(call.params)
    if call.operation == "PutMetricAlarm":
        return scaling.alarm_deletion([call.params["AlarmName"]])[0]
    return None


def _uses(call: Call) -> tuple[str, ...]:
    """What the endpoint, config or component a call makes runs on: its config, its variants'
    models; a component's model and endpoint."""
    params = call.params
    if call.operation in ("CreateEndpoint", "UpdateEndpoint"):
        return (f"endpoint config {params['EndpointConfigName']}",)
    if "InferenceComponentName" in params:
        model = (f"model {params['Specification']['ModelName']}",)
        return (*model, f"endpoint {params['EndpointName']}") if "EndpointName" in params else model
    return tuple(
        f"model {v['ModelName']}" for v in params.get("ProductionVariants", ()) if "ModelName" in v
    )


def undo(call: Call) -> Undo | None:
    """How a failed run takes `call` back (None: it left nothing to take back)."""
    deletion = _deletion(call)
    if deletion is not None:
        return Undo(touched(call), deletion, _uses(call))
    if call.operation == "UpdateEndpoint":
        name, config = call.params["EndpointName"], call.params["EndpointConfigName"]
        return Undo(
            f"endpoint {name} runs on {config} now (UpdateEndpoint was made)", None, _uses(call)
        )
    if call.operation == "UpdateInferenceComponent":
        name, model = call.params["InferenceComponentName"], call.params["Specification"]
        return Undo(
            f"inference component {name} runs model {model['ModelName']} now "
            "(UpdateInferenceComponent was made)",
            None,
            _uses(call),
        )
    if (call.service, call.operation) in _WRITES:
        return Undo(touched(call))
    return None


def undo_beside(replaced: Sequence[Call]) -> Callable[[Call], Undo | None]:
    """`undo` for a run whose calls `replaced` replace what stood before: those stay, named."""
    kept = {touched(call) for call in replaced}  # an alarm's action is armed when it is made
    return lambda call: Undo(touched(call)) if touched(call) in kept else undo(call)
