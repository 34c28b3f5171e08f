"""The one record pipeline: route -> dispatch -> format.

Every entry point (a real-time request, a record of a Batch Transform mini-batch, a line of an
offline batch file) goes through `Pipeline`: `target` decides the route, `answer` calls it
in-process and shapes its answer.
"""

import asyncio

from starlette.types import ASGIApp, Scope

from handler import asgi_call, formats, kinds, records, routing
from handler.routing import Target

JSON_MEDIA = b"application/json"


class Pipeline:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._served: frozenset[str] | None = None
        self._probing = asyncio.Lock()

    async def served(self, scope: Scope, headers: asgi_call.Headers) -> frozenset[str]:
        """The inference routes this server has, learned once by asking the server itself:
        a registered POST route answers GET with 405, a missing one with 404."""
        if self._served is None:
            async with self._probing:
                if self._served is None:
                    self._served = frozenset(
                        [
                            route
                            for route in sorted(kinds.INFERENCE_ROUTES)
                            if await self._exists(scope, headers, route)
                        ]
                    )
        return self._served

    async def _exists(self, scope: Scope, headers: asgi_call.Headers, route: str) -> bool:
        probe = [(k, v) for k, v in headers if k == b"authorization"]
        reply = await asgi_call.call(self.app, scope, "GET", route, b"", probe, asyncio.Event())
        return reply.status != 404

    async def target(
        self, scope: Scope, headers: asgi_call.Headers, raw: bytes, route_hint: str | None
    ) -> Target:
        """Parse one record and decide its route (raises RequestError or BatchLineError)."""
        served = await self.served(scope, headers)
        return routing.target(records.parse(raw), raw, route_hint, served)

    async def answer(
        self,
        scope: Scope,
        headers: asgi_call.Headers,
        target: Target,
        request_id: str,
        disconnected: asyncio.Event,
    ) -> tuple[int, bytes]:
        """Call the target's route and shape its answer: (status, body)."""
        reply = await asgi_call.call(
            self.app,
            scope,
            "POST",
            target.route,
            target.body,
            asgi_call.request_headers(headers, target.body, request_id),
            disconnected,
        )
        body = bytes(reply.body)
        if target.custom_id is not None:
            is_json = (reply.header(b"content-type") or b"").startswith(JSON_MEDIA)
            return 200, formats.batch_output_line(
                target.custom_id, reply.status, request_id, body, is_json
            )
        return reply.status, formats.shaped(target.answer, reply.status, body)
