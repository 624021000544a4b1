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

:class:`SimulatedAgent` implements the agent protocol (:mod:`oracle.agents.protocol`) on a
:class:`~oracle.agents.protocol.VirtualClock`: ``start`` emits the nominal trajectory and boundary
reports; ``kill`` abandons the run and records, in the simulated world (never in the
workspace or transcript), how far it got, i.e. which failure struck; ``resume`` re-derives
from the preserved transcript and facts with events whose durations add up to
:func:`branch_costs`'s ``J``. :mod:`oracle.agents` lists it as ``sim:<family>`` (and
``simulated``/``simulator``, the ``swe-pilot`` family unless ``family`` is given).
:func:`simulate_label_set` computes the same costs vectorised, for every ``r < f`` and
repetition, straight into an :class:`oracle.tables.LabelSet`.
"""

from oracle.simulator.agent import STATE_FILE, SimulatedAgent, SimulatedRun
from oracle.simulator.fast import simulate_label_set
from oracle.simulator.model import (
    LatentTask,
    TaskBatch,
    batch_branch_costs,
    branch_costs,
    build_task,
    family_tasks,
    task_specs,
)
from oracle.workloads import FAMILIES, family_names, get_family

__all__ = [
    "FAMILIES", "STATE_FILE", "LatentTask", "SimulatedAgent", "SimulatedRun", "TaskBatch",
    "batch_branch_costs", "branch_costs", "build_task", "family_names",
    "family_tasks", "get_family", "simulate_label_set", "task_specs",
]
