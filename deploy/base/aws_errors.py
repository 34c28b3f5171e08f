"""What an AWS error answer means: the one rule for "it does not exist"."""

import botocore.exceptions

# S3's HeadObject answers a bare 404; the others name the case.
_MISSING_CODES = frozenset(
    {
        "404",
        "NoSuchKey",
        "NotFound",
        "ResourceNotFound",
        "ResourceNotFoundException",
        "RepositoryNotFoundException",
        "ImageNotFoundException",
    }
)


def missing(error: botocore.exceptions.ClientError) -> bool:
    """Whether an error answer means the resource does not exist (SageMaker says so as a
    ValidationException "Could not find ..."); access denied and the rest are not."""
    detail = error.response.get("Error", {})
    return detail.get("Code") in _MISSING_CODES or "Could not find" in detail.get("Message", "")
