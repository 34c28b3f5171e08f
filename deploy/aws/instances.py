"""Facts about SageMaker instance types and AMIs that the deploy kit sizes things with."""

# GPUs per instance type for the families SageMaker hosts LLMs on (size -> GPU count).
_GPUS_BY_SIZE = {
    "g5": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4,
           "24xlarge": 4, "48xlarge": 8},
    "g6": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4,
           "24xlarge": 4, "48xlarge": 8},
    "g6e": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4,
            "24xlarge": 4, "48xlarge": 8},
    "g4dn": {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4},
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},
    "p4d": {"24xlarge": 8},
    "p4de": {"24xlarge": 8},
    "p5": {"48xlarge": 8},
    "p5e": {"48xlarge": 8},
    "p5en": {"48xlarge": 8},
}  # fmt: skip

# The inference AMI whose NVIDIA driver (580, CUDA 13.0) runs the vLLM 0.32 image (CUDA 12.9).
INFERENCE_AMI = "al2023-ami-sagemaker-inference-gpu-4-1"
# Transform instances only offer drivers 470 and 535 (CUDA <= 12.2), and only these families.
TRANSFORM_FAMILIES = ("p2", "p3", "g4dn", "g5", "g6")


def gpu_count(instance_type: str) -> int:
    """GPUs of `ml.g5.12xlarge` and the like; 0 for CPU or unknown types."""
    parts = instance_type.split(".")
    if len(parts) != 3:
        return 0
    return _GPUS_BY_SIZE.get(parts[1], {}).get(parts[2], 0)
