"""SageMaker's DataProcessing for one record: InputFilter before sending, JoinSource and
OutputFilter after, as CreateTransformJob defines them.

- InputFilter selects part of a JSON record; a record that is not JSON is sent as it is, so the
  container answers it with its own error line instead of the file being lost.
- JoinSource=Input puts the answer under `SageMakerOutput` in a JSON object record; any other
  record becomes `{"SageMakerInput": record, "SageMakerOutput": answer}`. The record joined is the
  original one, before InputFilter.
- OutputFilter selects part of the joined record (or of the answer without a join).
"""

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
