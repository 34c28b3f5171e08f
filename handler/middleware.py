"""SageMakerMiddleware: the pure ASGI class vLLM installs through `--middleware`."""

from starlette.types import ASGIApp, Receive, Scope, Send


class SageMakerMiddleware:
    """Owns the SageMaker routes and passes everything else to vLLM untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
