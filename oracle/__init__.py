"""oracle: the paired-recovery harness that turns executed agent branches into label sets.

Its rooms, each a sub-package with one job:

- :mod:`oracle.harness` - one nominal run and one branch (``branch``), frozen and hashed study
  plans (``plan``), the resumable study runner (``study``), executors (``executors``);
- :mod:`oracle.store` - the checkpoint store, the effect log a checkpoint waits on, the audit log;
- :mod:`oracle.agents` - every agent the harness can drive, found by name, the pinned real
  runtimes (``runtimes``) and the loopback model server beneath it (``agents.model_server``);
- :mod:`oracle.simulator` - the generative model of agent runs and recovery, its agent, the
  vectorised study and the workload families;
- ground floor: :mod:`oracle.protocol` (the agent protocol every agent implements) and
  :mod:`oracle.processes` (fail-stop by PID namespace).

What it produces is a label set (:mod:`labelsets`). The names below are the public API; each
is imported on first use, so ``import oracle`` stays standard-library only (the scripted
agent's child program runs under ``python -S``).
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_PUBLIC = {
    **dict.fromkeys(["Agent", "AgentRun", "AgentReport", "RestorePoint", "TaskSpec",
                     "make_tasks"], "oracle.protocol"),
    **dict.fromkeys(["agent_names", "get_agent", "register_agent"], "oracle.agents"),
    **dict.fromkeys(["BranchSpec", "HarnessConfig", "run_branch"], "oracle.harness.branch"),
    **dict.fromkeys(["Plan", "PlanError", "full_table_plan", "pilot_plan"], "oracle.harness.plan"),
    **dict.fromkeys(["build_label_set", "collect_nominal", "freeze_plan", "run_study"],
                    "oracle.harness.study"),
    "make_executor": "oracle.harness.executors",
    **dict.fromkeys(["CheckpointStore", "CheckpointError"], "oracle.store.checkpoint"),
    "AuditLog": "oracle.store.audit",
    **dict.fromkeys(["SimulatedAgent", "simulate_label_set", "family_names", "get_family",
                     "FAMILIES"], "oracle.simulator"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'oracle' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
