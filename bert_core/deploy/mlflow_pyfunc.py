"""The task pyfunc's class: an MLflow PythonModel that loads a logged model directory and answers raw text.

It lives in a module of its own, importing mlflow at the top, so that its `predict` carries type hints MLflow
can read (a DataFrame in: the signature's columns; one answer dict per row out). MLflow logs it from code
(bert_core/deploy/mlflow_pyfunc_entry.py, its "models from code" file), not as a CloudPickle of an object.
"""

from __future__ import annotations

from typing import Any

import mlflow.pyfunc
import pandas as pd


class BertTaskModel(mlflow.pyfunc.PythonModel):
    """Loads the logged model directory; predict(records) -> one answer per record."""

    def load_context(self, context) -> None:
        from bert_core.deploy.serving import TaskPredictor

        self.model_dir = context.artifacts["model_dir"]
        served = context.model_config or {}
        # An export's graph (ONNX Runtime) when one was logged with the model, else eager PyTorch; its INT8
        # graph when logged to serve that.
        self.predictor = TaskPredictor.from_model_dir(self.model_dir, export_dir=context.artifacts.get("export_dir"),
                                                      quantized=bool(served.get("quantized")))
        # What promotion compares the served answers with (None: the model's check_examples.json).
        self.checks = served.get("checks")

    # MLflow hands predict the request converted to the signature's columns: a DataFrame, one row per record.
    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        from mlflow.exceptions import MlflowException
        from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

        from bert_core.deploy.serving import InvalidRequest

        try:
            return self.predictor.predict(model_input)
        except InvalidRequest as exc:
            raise MlflowException(str(exc), error_code=INVALID_PARAMETER_VALUE) from None
