"""`s3://bucket/key` URIs: the one parser the batch tools and the server's S3 store share."""

S3 = "s3://"


def is_s3(uri: str) -> bool:
    return uri.startswith(S3)


def s3_parts(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> ("bucket", "a/b")."""
    bucket, _, key = uri[len(S3) :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, key
