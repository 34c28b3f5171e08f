"""Which way a record reaches vLLM (`core.dispatch`): its serving object or its HTTP route, by
the table in the module's docstring; the container's setting and the invocation's custom
attribute that choose it."""

from typing import Any

import pytest

from vllm_sagemaker.core import dispatch
from vllm_sagemaker.core.config import Config
from vllm_sagemaker.core.dispatch import Way
from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.environment import environment_problems
from vllm_sagemaker.core.errors import RequestError

# A record of a multi-record body that nothing sends to the route: the table's last row.
SERVED: dict[str, Any] = {
    "chosen": None,
    "record": True,
    "streams": False,
    "served": True,
    "customer_middleware": False,
}


@pytest.mark.parametrize(
    ("row", "change", "expected"),
    [
        ("anything else", {}, Way.SERVING),
        ("anything else, serving asked for", {"chosen": Way.SERVING}, Way.SERVING),
        ("dispatch=route or SAGEMAKER_RECORD_DISPATCH=route", {"chosen": Way.ROUTE}, Way.ROUTE),
        ("one real-time request", {"record": False}, Way.ROUTE),
        (
            "one real-time request, serving asked for",
            {"record": False, "chosen": Way.SERVING},
            Way.ROUTE,
        ),
        ("a body that asks to stream", {"streams": True}, Way.ROUTE),
        ("a stream, serving asked for", {"streams": True, "chosen": Way.SERVING}, Way.ROUTE),
        ("no serving object answers the route here", {"served": False}, Way.ROUTE),
        ("no serving object, serving asked", {"served": False, "chosen": Way.SERVING}, Way.ROUTE),
        ("customer middlewares or formatters", {"customer_middleware": True}, Way.ROUTE),
        (
            "customer middlewares, serving asked for",
            {"customer_middleware": True, "chosen": Way.SERVING},
            Way.ROUTE,
        ),
        (
            "every reason for the route at once",
            {
                "chosen": Way.ROUTE,
                "record": False,
                "streams": True,
                "served": False,
                "customer_middleware": True,
            },
            Way.ROUTE,
        ),
    ],
)
def test_the_way_of_a_request_is_the_table_s_row(
    row: str, change: dict[str, Any], expected: Way
) -> None:
    assert dispatch.way(**{**SERVED, **change}) is expected, row


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("serving", Way.SERVING),
        ("route", Way.ROUTE),
        ("ROUTE", Way.ROUTE),
        (" Serving ", Way.SERVING),
        ("\troute\n", Way.ROUTE),
    ],
)
def test_the_container_s_setting_is_a_way_or_unset(value: str | None, expected: Way | None) -> None:
    assert dispatch.setting(value) is expected


@pytest.mark.parametrize("value", ["sideways", "routes", "http", "serving,route", "0"])
def test_a_setting_that_names_no_way_stops_serve(value: str) -> None:
    with pytest.raises(ConfigError, match="SAGEMAKER_RECORD_DISPATCH") as raised:
        dispatch.setting(value)
    assert "serving, route" in str(raised.value)
    assert repr(value) in str(raised.value)
    # `serve` and `deploy --env` refuse it before anything starts.
    (problem,) = environment_problems({dispatch.DISPATCH_VAR: value}, None)
    assert problem.startswith("SAGEMAKER_RECORD_DISPATCH")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("serving", Way.SERVING),
        ("route", Way.ROUTE),
        ("Route", Way.ROUTE),
        (" SERVING ", Way.SERVING),
    ],
)
def test_the_custom_attribute_is_a_way_or_absent(value: str | None, expected: Way | None) -> None:
    assert dispatch.asked(value) is expected


@pytest.mark.parametrize("value", ["", "sideways", "http", "route;serving"])
def test_a_custom_attribute_that_names_no_way_is_a_400(value: str) -> None:
    with pytest.raises(RequestError) as raised:
        dispatch.asked(value)
    error = raised.value
    assert (error.status, error.param) == (400, "dispatch")
    assert error.code == "invalid_custom_attribute"
    assert f"dispatch={value}" in error.message
    assert "serving, route" in error.message
    assert error.body()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"SAGEMAKER_RECORD_DISPATCH": ""}, None),
        ({"SAGEMAKER_RECORD_DISPATCH": "route"}, Way.ROUTE),
        ({"SAGEMAKER_RECORD_DISPATCH": "Serving"}, Way.SERVING),
    ],
)
def test_the_config_reads_sagemaker_record_dispatch(
    env: dict[str, str], expected: Way | None
) -> None:
    assert Config.from_env(env).record_dispatch is expected


def test_the_config_refuses_a_record_dispatch_that_names_no_way() -> None:
    with pytest.raises(ConfigError, match="SAGEMAKER_RECORD_DISPATCH"):
        Config.from_env({"SAGEMAKER_RECORD_DISPATCH": "sideways"})
