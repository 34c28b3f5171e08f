"""SageMaker's DataProcessing for one record, as CreateTransformJob defines it: InputFilter
selects part of a JSON record before it is sent (one not JSON is sent as it is, for the container
to answer with an error line); JoinSource=Input puts the answer under `SageMakerOutput` in the
original record (before InputFilter) when it is a JSON object, else makes
`{"SageMakerInput": record, "SageMakerOutput": answer}`; OutputFilter selects part of the result."""

import json
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.deploy.transform.jsonpath import JsonPath, dumps


def _value(raw: bytes) -> Any:
    """The JSON value of `raw`, or its text when it is not JSON."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


@dataclass(frozen=True)
class DataProcessing:
    input_filter: JsonPath | None = None
    join_input: bool = False
    output_filter: JsonPath | None = None

    @property
    def per_record(self) -> bool:
        """Whether answers must be matched to records one by one."""
        return self.join_input or self.output_filter is not None

    def filtered_input(self, record: bytes) -> bytes:
        if self.input_filter is None:
            return record
        try:
            value = json.loads(record)
        except ValueError:
            return record
        return dumps(self.input_filter(value))

    def output(self, record: bytes, answer: bytes) -> bytes:
        """The output record for one input record and its answer."""
        if not self.per_record:
            return answer
        value = _value(answer)
        if self.join_input:
            source = _value(record)
            if isinstance(source, dict):
                value = {**source, "SageMakerOutput": value}
            else:
                value = {"SageMakerInput": source, "SageMakerOutput": value}
        if self.output_filter is not None:
            value = self.output_filter(value)
        return dumps(value)
