"""Simulated agent workloads: a generative model of agent runs and of recovery by re-derivation.

One real label cost the pilot 8.4 agent-minutes (paper, G.4). This package gives a fast,
reproducible workbench behind the same agent protocol: a simulated agent whose nominal
runs are emitted in the canonical event schema and whose recoveries cost what the
generative model says, on a virtual clock.

- :mod:`oracle.simulator.model` - the generative model (latent tasks, nominal
  trajectories, checkpoint costs) and the cost function shared by both paths;
- :mod:`oracle.simulator.agent` - the simulated agent behind the agent protocol;
- :mod:`oracle.simulator.fast` - a whole study vectorised, straight into a label set.

Two ways to run it
==================

:class:`SimulatedAgent` implements the agent protocol (:mod:`oracle.protocol`) on a
:class:`~oracle.protocol.VirtualClock`: ``start`` emits the nominal trajectory and boundary
reports; ``kill`` abandons the run and records, in the simulated world (never in the
workspace or transcript), how far it got, i.e. which failure struck; ``resume`` re-derives
from the preserved transcript and facts with events whose durations add up to
:func:`branch_costs`'s ``J``. :mod:`oracle.agents` lists it as ``sim:<family>`` (and
``simulated``/``simulator``, the ``swe-pilot`` family unless ``family`` is given).
:func:`simulate_label_set` computes the same costs vectorised, for every ``r < f`` and
repetition, straight into an :class:`labelsets.tables.LabelSet`.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it (imported on first use: the agent registry reads
#: the workload families' names without loading the model, pandas or the label-set tables)
_PUBLIC = {
    **dict.fromkeys(["STATE_FILE", "SimulatedAgent", "SimulatedRun"], "oracle.simulator.agent"),
    "simulate_label_set": "oracle.simulator.fast",
    **dict.fromkeys(["LatentTask", "TaskBatch", "batch_branch_costs", "branch_costs",
                     "build_task", "family_tasks", "task_specs"], "oracle.simulator.model"),
    **dict.fromkeys(["FAMILIES", "family_names", "get_family"], "oracle.simulator.workloads"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'oracle.simulator' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
