"""``python -m experiments.collect_labels --runtime codex``: the LLM-free agents as brains behind
a real runtime, end to end on one small study; the runtime and its version in the label set's
provenance. The runtime is installed into .runtimes/ when it can be (else the test skips)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from experiments.collect_labels import main
from labelsets.tables import LabelSet
from tests.oracle.conftest import ready_runtime


@pytest.mark.slow
def test_a_migrate_study_through_codex(tmp_path: Path) -> None:
    """One migrate task (three modules: four steps, the API mappings found porting the first
    carried to the others in the commands), pilot design, one repetition: the nominal run,
    four branches killed mid-tool or mid-model-call and resumed from the captured Codex
    sessions, nothing diverging."""
    spec = ready_runtime("codex").spec
    t0 = time.monotonic()
    out = tmp_path / "study"
    assert main(["--agent", "migrate", "--runtime", "codex", "--tasks", "1", "--repos", "1",
                 "--seed", "5", "--repetitions", "1", "--out", str(out), "--no-progress"]) == 0
    ls = LabelSet.load(out / "labelset")
    prov = ls.provenance
    assert prov["agent"] == "codex" and prov["agent_options"]["brain"] == "migrate"
    assert prov["runtime"]["runtime"] == "codex" and prov["runtime"]["brain"] == "migrate"
    assert prov["runtime"]["version"] == prov["runtime"]["pinned_version"] == spec.version
    assert ls.tasks["verified"].all() and (ls.tasks["granularity"] == "tool_call").all()
    assert (ls.tasks["n_boundaries"] == 4).all()  # three modules and the final step
    assert len(ls.recovery) == 4 and ls.recovery["verified"].all()
    assert not ls.recovery["quarantined"].any() and len(ls.labels) == 2
    commands = [e.command for e in ls.trajectories[ls.task_ids[0]].events if e.command]
    assert [c.count("--step") for c in commands] == [1, 1, 1, 1]
    assert "--facts" not in commands[0] and all("map:" in c for c in commands[1:])
    print(f"migrate study through codex: {time.monotonic() - t0:.1f} s")
