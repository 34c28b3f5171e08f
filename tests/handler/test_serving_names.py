"""vLLM's names that handler/records/serving.py calls records through, pinned without a server.

Each `SERVING` row says: the route `path` validates its body as `request`, reads its serving
object from `app.state.<state>`, and calls its `method` (or the object itself). A vLLM upgrade
that renames or moves any of them fails here, naming what moved, instead of every record
failing at run time.
"""

import importlib
import inspect
import pkgutil
import re
import sys
import types
import typing
from collections.abc import Callable
from typing import Any

import pytest
import vllm.entrypoints
from fastapi import APIRouter
from fastapi.routing import APIRoute

from vllm_sagemaker.handler.records.serving import SERVING, Serving


def _router_modules() -> dict[str, types.ModuleType]:
    """Every `api_router` module of vLLM's entrypoints (where each API attaches its routes)."""
    prefix = vllm.entrypoints.__name__ + "."
    names = [
        name
        for _, name, _ in pkgutil.walk_packages(vllm.entrypoints.__path__, prefix)
        if name.endswith(".api_router")
    ]
    return {name: importlib.import_module(name) for name in names}


def _post_routes() -> dict[str, list[APIRoute]]:
    """The POST routes of every module-level `APIRouter` in vLLM's router modules, by path."""
    routes: dict[str, list[APIRoute]] = {}
    for module in _router_modules().values():
        for router in vars(module).values():
            if not isinstance(router, APIRouter):
                continue
            for route in router.routes:
                if isinstance(route, APIRoute) and "POST" in route.methods:
                    routes.setdefault(route.path, []).append(route)
    return routes


ROUTES = _post_routes()


def _route(path: str) -> APIRoute:
    found = ROUTES.get(path, [])
    assert len(found) == 1, (
        f"vLLM has {len(found)} POST routes {path} in its api_router modules (one expected): "
        f"serving.SERVING[{path!r}] names a route this vLLM does not have"
    )
    return found[0]


def _reads_state(source: str, state: str) -> bool:
    """Whether `source` reads `app.state.<state>`: as an attribute or `getattr`'s string."""
    name = re.escape(state)
    return re.search(rf"state\.{name}\b|([\"']){name}\1", source) is not None


def _getters(module: types.ModuleType, state: str) -> list[Callable[..., Any]]:
    """The functions of `module` that read `app.state.<state>` (the route's handler getters)."""
    return [
        function
        for _, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module.__name__
        and _reads_state(inspect.getsource(function), state)
    ]


def _serving_class(getter: Callable[..., Any]) -> type:
    """The serving class a getter returns, by its return annotation (`X` or `X | None`)."""
    returned = typing.get_type_hints(getter).get("return")
    classes = [c for c in typing.get_args(returned) or (returned,) if c is not type(None)]
    assert len(classes) == 1 and isinstance(classes[0], type), (
        f"{getter.__module__}.{getter.__name__} has no serving class as its return annotation "
        f"({returned!r})"
    )
    return classes[0]


PATHS = sorted(SERVING)


def test_the_table_covers_the_record_kinds_vllm_routes() -> None:
    """Every route `/invocations` sends records to through a serving object is in the table
    (a row dropped by mistake would silently send records to the HTTP route)."""
    assert set(PATHS) >= {
        "/v1/chat/completions",
        "/v1/chat/completions/batch",
        "/v1/completions",
        "/v1/embeddings",
        "/score",
        "/rerank",
        "/classify",
        "/pooling",
    }


@pytest.mark.parametrize("path", PATHS)
def test_the_route_validates_its_body_as_the_request_model(path: str) -> None:
    row = SERVING[path]
    body = _route(path).body_field
    assert body is not None, f"vLLM's {path} takes no body"
    annotation = body.field_info.annotation
    assert annotation == row.request, (
        f"vLLM's {path} validates its body as {annotation!r}; serving.SERVING[{path!r}] builds "
        f"{row.request!r}"
    )


@pytest.mark.parametrize("path", PATHS)
def test_the_route_reads_the_same_serving_object(path: str) -> None:
    row = SERVING[path]
    module = sys.modules[_route(path).endpoint.__module__]
    assert _reads_state(inspect.getsource(module), row.state), (
        f"{module.__name__} (vLLM's {path}) never reads app.state.{row.state}: "
        f"serving.SERVING[{path!r}].state names a serving object the route does not use"
    )
    assert _getters(module, row.state), (
        f"no function of {module.__name__} returns app.state.{row.state}"
    )


@pytest.mark.parametrize("path", PATHS)
def test_the_serving_object_has_the_method(path: str) -> None:
    row: Serving = SERVING[path]
    module = sys.modules[_route(path).endpoint.__module__]
    method = row.method or "__call__"
    for getter in _getters(module, row.state):
        cls = _serving_class(getter)
        assert callable(getattr(cls, method, None)), (
            f"{cls.__module__}.{cls.__qualname__} (app.state.{row.state}) has no {method}: "
            f"serving.SERVING[{path!r}].method must follow vLLM's rename"
        )
        parameters = list(inspect.signature(getattr(cls, method)).parameters)
        assert len(parameters) >= 3, (
            f"{cls.__qualname__}.{method}{parameters} does not take (request, raw_request)"
        )
    called = f"handler.{row.method}(" if row.method else "handler(request, raw_request)"
    assert called in inspect.getsource(module), (
        f"vLLM's {path} ({module.__name__}) no longer calls `{called}`"
    )


def test_load_tracking_keeps_its_names() -> None:
    """serving.py counts a record as vLLM's `load_aware_call` counts a route's request."""
    from vllm.entrypoints.serve.utils import api_utils

    source = inspect.getsource(api_utils.load_aware_call)
    assert "enable_server_load_tracking" in source
    assert "server_load_metrics" in source
