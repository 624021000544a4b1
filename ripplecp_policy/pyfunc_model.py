"""The pyfunc wrapper of an exported placement policy, logged as code (MLflow models-from-code).

MLflow stores this file in the model folder and runs it when ``mlflow.pyfunc.load_model``
loads the model; it declares the model with ``mlflow.models.set_model``. The policy itself
is read from the model's data by :func:`ripplecp_policy.stored.read_policy` (no pickle, every
stored file checked against its digest, this file included); :func:`ripplecp_policy.export.load_policy_model`
reads the same data without running this file at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
from mlflow.models import set_model

from ripplecp_policy.export import decide_frame
from ripplecp_policy.stored import read_policy


class PlacementModel(mlflow.pyfunc.PythonModel):
    """A fitted placement policy plus its budget config, as an MLflow pyfunc model."""

    def load_context(self, context: Any) -> None:
        folder = Path(context.artifacts["config"]).resolve().parents[1]
        self.policy, self.config = read_policy(folder)

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        cfg = dict(self.config)
        if params:
            cfg.update({k: v for k, v in params.items() if v is not None})
        return decide_frame(self.policy, pd.DataFrame(model_input), cfg)


set_model(PlacementModel())
