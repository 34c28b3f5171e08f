"""The bearer token of SageMaker's OpenAI-compatible path, made as the SageMaker SDK makes it.

`sagemaker.core.token_generator.generate_token` (sagemaker-core 2.12 and later) presigns
`POST https://sagemaker.amazonaws.com/?Action=CallWithBearerToken` with SigV4 (service
`sagemaker`, the caller's region, `host` the only signed header), appends `&Version=1` to the
URL without its scheme, and base64-encodes it behind `sagemaker-api-key-`. That package brings
pandas, scipy, paramiko and more into a client that needs none of them, so the same few lines
run here on botocore, which the client has already. No AWS call is made: the token is a
signature, and SageMaker checks it (and the caller's IAM permissions) when it is used.
"""

import base64
import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

if TYPE_CHECKING:
    from botocore.credentials import ReadOnlyCredentials

HOST = "sagemaker.amazonaws.com"
SERVICE = "sagemaker"
ACTION = "CallWithBearerToken"
PREFIX = "sagemaker-api-key-"
VERSION = "&Version=1"
MAX_S = 12 * 3600
_DURATION = re.compile(r"(\d+)([smh]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600}


def token(credentials: "ReadOnlyCredentials", region: str, expires_s: int) -> str:
    """A token for `region`, good for `expires_s` seconds (or until the credentials expire).
    botocore is loaded here, so the option checks that use this module's rules load none."""
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(
        method="POST", url=f"https://{HOST}/", headers={"host": HOST}, params={"Action": ACTION}
    )
    SigV4QueryAuth(credentials, SERVICE, region, expires=expires_s).add_auth(request)
    presigned = request.url.removeprefix("https://") + VERSION
    return PREFIX + base64.b64encode(presigned.encode()).decode()


def presigned_query(value: str) -> dict[str, str] | None:
    """The query of the presigned URL inside a token (None: not a token of this form)."""
    if not value.startswith(PREFIX):
        return None
    try:
        url = base64.b64decode(value.removeprefix(PREFIX), validate=True).decode()
    except ValueError:
        return None
    host, _, query = url.partition("/?")
    return dict(parse_qsl(query)) if host == HOST else None


def base_url(runtime_url: str, endpoint: str) -> str:
    """The OpenAI base URL of an endpoint (clients add `/chat/completions`)."""
    return f"{runtime_url.rstrip('/')}/endpoints/{endpoint}/openai/v1"


def duration_s(text: str) -> int | None:
    """`12h`, `90m`, `600s` or `600` in seconds; None when it is not one, or not within
    SageMaker's limit (1 s to 12 h)."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        return None
    seconds = int(match[1]) * _UNIT_S[match[2]]
    return seconds if 0 < seconds <= MAX_S else None
