"""`deploy invoke --stream` prints each token as it arrives, however the stream's bytes are
cut."""

from vllm_sagemaker.deploy.kit import invoke


def test_streamed_tokens_are_printed_as_they_arrive() -> None:
    """InvokeEndpointWithResponseStream hands over the SSE bytes in arbitrary pieces."""
    pieces = [
        b'data: {"choices": [{"text": "Hel',
        b'lo"}]}\n\ndata: {"choices": [{"delta": {"content": ", world"}}]}\n',
        b"\ndata: [DONE]\n\n",
    ]
    assert list(invoke.stream_text(pieces)) == ["Hello", ", world"]
