"""Application Auto Scaling of inference components' copies, which moto 5.2.5 lacks:
`inference-component/<name>` on `sagemaker:inference-component:DesiredCopyCount`
(RegisterScalableTarget of a component that exists, PutScalingPolicy of target tracking, with
its two alarms, or step scaling, Describe*, DeleteScalingPolicy, DeregisterScalableTarget, which
deletes its policies as the API reference says); other dimensions go to moto, and the Describe
calls answer both.

PutScalingPolicy without a target: ObjectNotFoundException "No scalable target registered for
service namespace: ..., resource ID: ..., scalable dimension: ..." (AWS's words in public
issues). Ours, unconfirmed: the messages of a target for a missing component, of a missing
capacity or scaling configuration, and DeleteScalingPolicy's and DeregisterScalableTarget's
ObjectNotFoundException.
"""

import copy
import re
import time
import uuid

from tests.support.components.common import (
    ACCOUNT,
    Answer,
    Calls,
    Forward,
    Refused,
    invalid,
    merged,
)

COPIES = "sagemaker:inference-component:DesiredCopyCount"
COMPONENT_ID = re.compile(r"inference-component/(?P<name>.+)")
SCALING_ROLE = (
    f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/sagemaker.application-autoscaling."
    "amazonaws.com/AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)


class AutoScaling(Calls):
    """The calls of Application Auto Scaling the emulator answers (those of COPIES; the others
    are moto's)."""

    OPERATIONS = frozenset(
        {
            "RegisterScalableTarget",
            "PutScalingPolicy",
            "DeleteScalingPolicy",
            "DeregisterScalableTarget",
            "DescribeScalableTargets",
            "DescribeScalingPolicies",
        }
    )

    def ours(self, params: Answer) -> bool:
        return (
            params.get("ServiceNamespace") == "sagemaker"
            and params.get("ScalableDimension") == COPIES
        )

    def absent_target(self, params: Answer) -> Refused:
        return Refused(
            "ObjectNotFoundException",
            f"No scalable target registered for service namespace: {params['ServiceNamespace']}, "
            f"resource ID: {params['ResourceId']}, scalable dimension: "
            f"{params['ScalableDimension']}",
        )

    def register_scalable_target(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        resource = params["ResourceId"]
        found = COMPONENT_ID.fullmatch(resource)
        with self.state.lock:
            known = found is not None and found["name"] in self.state.components
        if not known:
            raise invalid(f"The inference component of resource ID {resource} does not exist.")
        with self.state.lock:
            standing = self.state.targets.get(resource)
            if standing is None and ("MinCapacity" not in params or "MaxCapacity" not in params):
                raise invalid(
                    "MinCapacity and MaxCapacity are required to register a new scalable target."
                )
            target = (
                copy.deepcopy(standing)
                if standing
                else {
                    "ServiceNamespace": "sagemaker",
                    "ResourceId": resource,
                    "ScalableDimension": COPIES,
                    "RoleARN": SCALING_ROLE,
                    "CreationTime": time.time(),
                    "SuspendedState": {
                        "DynamicScalingInSuspended": False,
                        "DynamicScalingOutSuspended": False,
                        "ScheduledScalingSuspended": False,
                    },
                    "ScalableTargetARN": (
                        f"arn:aws:application-autoscaling:{self.region}:{ACCOUNT}:scalable-target/"
                        f"{uuid.uuid4().hex}"
                    ),
                }
            )
            for key in ("MinCapacity", "MaxCapacity", "SuspendedState"):
                if key in params:
                    target[key] = copy.deepcopy(params[key])
            if target["MinCapacity"] > target["MaxCapacity"]:
                raise invalid(
                    f"MinCapacity {target['MinCapacity']} is more than MaxCapacity "
                    f"{target['MaxCapacity']}."
                )
            self.state.targets[resource] = target
            return {"ScalableTargetARN": target["ScalableTargetARN"]}

    def put_scaling_policy(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        resource, name = params["ResourceId"], params["PolicyName"]
        kind = params.get("PolicyType", "StepScaling")
        settings = {
            "TargetTrackingScaling": "TargetTrackingScalingPolicyConfiguration",
            "StepScaling": "StepScalingPolicyConfiguration",
        }
        if kind not in settings:
            raise invalid(f"PolicyType {kind} is not supported for {COPIES}.")
        if settings[kind] not in params:
            raise invalid(f"{settings[kind]} is required for a policy of type {kind}.")
        with self.state.lock:
            if resource not in self.state.targets:
                raise self.absent_target(params)
            standing = self.state.policies.get((resource, name))
            policy_arn = (
                standing["PolicyARN"]
                if standing
                else (
                    f"arn:aws:autoscaling:{self.region}:{ACCOUNT}:scalingPolicy:{uuid.uuid4()}:"
                    f"resource/sagemaker/{resource}:policyName/{name}"
                )
            )
            alarms = []
            if kind == "TargetTrackingScaling":
                alarms = [
                    {
                        "AlarmName": alarm,
                        "AlarmARN": f"arn:aws:cloudwatch:{self.region}:{ACCOUNT}:alarm:{alarm}",
                    }
                    for alarm in (
                        f"TargetTracking-{resource}-Alarm{side}-{uuid.uuid4()}"
                        for side in ("High", "Low")
                    )
                ]
            policy = {
                "PolicyARN": policy_arn,
                "PolicyName": name,
                "ServiceNamespace": "sagemaker",
                "ResourceId": resource,
                "ScalableDimension": COPIES,
                "PolicyType": kind,
                settings[kind]: copy.deepcopy(params[settings[kind]]),
                "Alarms": alarms,
                "CreationTime": time.time(),
            }
            self.state.policies[(resource, name)] = policy
        answer: Answer = {"PolicyARN": policy_arn}
        if alarms:
            answer["Alarms"] = alarms
        return answer

    def delete_scaling_policy(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        key = (params["ResourceId"], params["PolicyName"])
        with self.state.lock:
            if self.state.policies.pop(key, None) is None:
                raise Refused(
                    "ObjectNotFoundException",
                    f"No scaling policy found for service namespace: sagemaker, resource ID: "
                    f"{key[0]}, scalable dimension: {COPIES}, policy name: {key[1]}",
                )
        return {}

    def deregister_scalable_target(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        resource = params["ResourceId"]
        with self.state.lock:
            if self.state.targets.pop(resource, None) is None:
                raise Refused(
                    "ObjectNotFoundException",
                    f"No scalable target found for service namespace: sagemaker, resource ID: "
                    f"{resource}, scalable dimension: {COPIES}",
                )
            for key in [key for key in self.state.policies if key[0] == resource]:
                del self.state.policies[key]
        return {}

    def scaling_entries(self, params: Answer, entries: list[Answer]) -> list[Answer] | None:
        """The emulator's entries a Describe call asks for; None: it asks for none of them."""
        if params.get("ServiceNamespace") != "sagemaker":
            return None
        if params.get("ScalableDimension", COPIES) != COPIES:
            return None
        given = params.get("ResourceIds") or (
            [params["ResourceId"]] if "ResourceId" in params else None
        )
        names = params.get("PolicyNames")
        return [
            copy.deepcopy(entry)
            for entry in entries
            if (given is None or entry["ResourceId"] in given)
            and (names is None or entry.get("PolicyName") in names)
        ]

    def describe_scalable_targets(self, params: Answer, forward: Forward) -> Answer | None:
        with self.state.lock:
            ours = self.scaling_entries(params, list(self.state.targets.values()))
        if ours is None:
            return None
        if params.get("ScalableDimension") == COPIES:
            return {"ScalableTargets": ours}
        return merged(forward, "ScalableTargets", ours, params)

    def describe_scaling_policies(self, params: Answer, forward: Forward) -> Answer | None:
        with self.state.lock:
            ours = self.scaling_entries(params, list(self.state.policies.values()))
        if ours is None:
            return None
        if params.get("ScalableDimension") == COPIES:
            return {"ScalingPolicies": ours}
        return merged(forward, "ScalingPolicies", ours, params)
