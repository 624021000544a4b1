"""The pyfunc wrapper of an exported placement policy, logged as code (MLflow models-from-code).

MLflow stores this file in the model folder and runs it on load; it declares the model with
``mlflow.models.set_model``. The policy comes from the model's artifacts: an xgboost booster
in its JSON format plus ``config.json`` (nothing unpickled), or a joblib pickle for policies
without one (see :mod:`ripplecp_policy.export`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import joblib
import mlflow.pyfunc
import pandas as pd
from mlflow.models import set_model

from ripplecp_policy.export import BoosterPolicy, decide_frame


class PlacementModel(mlflow.pyfunc.PythonModel):
    """A fitted placement policy plus its budget config, as an MLflow pyfunc model."""

    def load_context(self, context: Any) -> None:
        self.config = json.loads(Path(context.artifacts["config"]).read_text())
        if "booster" in context.artifacts:
            self.policy = BoosterPolicy.load(context.artifacts["booster"], self.config)
        else:
            self.policy = joblib.load(context.artifacts["policy"])

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        cfg = dict(self.config)
        if params:
            cfg.update({k: v for k, v in params.items() if v is not None})
        return decide_frame(self.policy, pd.DataFrame(model_input), cfg)


set_model(PlacementModel())
