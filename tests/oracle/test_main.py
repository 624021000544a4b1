"""``python -m oracle plan|run|audit``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracle.__main__ import audit_summary, main
from oracle.audit import AuditLog
from oracle.plan import Plan, PlanError
from oracle.tables import LabelSet


def test_plan_run_audit_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan_path = tmp_path / "p.json"
    assert main(["plan", "--agent", "scripted", "--tasks", "1", "--design", "pilot", "--seed", "5",
                 "--out", str(plan_path), "--task-opt", "time_scale=0.1", "--task-opt",
                 "n_files=2", "--task-opt", "n_steps=3"]) == 0
    plan = Plan.load(plan_path)
    assert plan.design == "pilot" and len(plan.cells) == 2 and plan.nominal
    assert "sha256" in capsys.readouterr().out
    out = tmp_path / "labels"
    assert main(["run", str(plan_path), "--out", str(out), "--executor", "inline"]) == 0
    err = capsys.readouterr().err
    assert "branch" in err and "quarantined=" in err  # tqdm progress bar with its postfix
    ls = LabelSet.load(out)
    assert len(ls.labels) >= 4 and ls.provenance["plan_hash"] == plan.hash
    study = tmp_path / "p.study"
    assert main(["audit", str(study)]) == 0
    text = capsys.readouterr().out
    assert "nominal runs: 1" in text and "sign-unstable cells" in text
    assert main(["audit", str(study / "audit.jsonl"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["branches"] == len(ls.recovery) and summary["complete_pairs"] == len(ls.labels)
    # a tampered plan is refused
    doc = json.loads(plan_path.read_text())
    doc["study_seed"] = 6
    plan_path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="hash mismatch"):
        main(["run", str(plan_path)])


def test_audit_summary_flags_quarantine_and_sign_instability() -> None:
    nominal = {"key": "nominal/t", "kind": "nominal", "task_id": "t",
               "checkpoints": [{"boundary": 1, "creation_s": 0.5}]}

    def br(rep: int, pos: int, role: str, cost: float, q: str | None = None) -> dict:
        pid = f"t:t1:c0:f2:rep{rep}"
        return {"key": f"{pid}/{pos}", "kind": "branch", "task_id": "t", "pair_id": pid,
                "cell_id": "t:t1:c0:f2", "role": role, "restore_point": 1 if role == "cp" else 0,
                "repetition": rep, "cost_s": cost, "quarantined": q is not None,
                "quarantine_reason": q, "verified": True, "capped": False, "plan_hash": "h"}

    recs = [nominal, br(1, 0, "cp", 1.0), br(1, 1, "skip", 3.0),
            br(2, 0, "skip", 1.0, "observation divergence in recovery"), br(2, 1, "cp", 2.0)]
    s = audit_summary(recs)
    assert s["branches"] == 4 and s["complete_pairs"] == 2 and s["quarantined_branches"] == 1
    assert s["quarantined_pairs"] == [{"pair_id": "t:t1:c0:f2:rep2",
                                       "reasons": ["observation divergence in recovery"]}]
    (u,) = s["sign_unstable_cells"]
    assert u["advantages"] == [1.5, -1.5] and u["third_repetition"] is False
    assert s["pairs_without_creation_cost"] == []
    # without the nominal record the candidate's creation cost is unknown: the pairs are
    # listed, never charged a creation cost of 0 (which would invent advantages 2.0/-1.0)
    s2 = audit_summary(recs[1:])
    assert s2["sign_unstable_cells"] == []
    assert s2["pairs_without_creation_cost"] == ["t:t1:c0:f2:rep1", "t:t1:c0:f2:rep2"]


def test_audit_of_missing_log_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no audit log"):
        main(["audit", str(tmp_path)])
    AuditLog(tmp_path / "audit.jsonl").append({"key": "x", "kind": "other"})
    assert main(["audit", str(tmp_path)]) == 0


def test_plan_refuses_a_task_count_the_agent_cannot_meet(tmp_path: Path) -> None:
    """``--tasks 48`` of a 32-task simulated study is an error, never a 32-task plan."""
    out = tmp_path / "p.json"
    with pytest.raises(SystemExit, match=r"--tasks 48: agent 'sim:swe-pilot': 48 tasks asked for, "
                                         r"the study holds 32 \(8 repositories x 4 tasks\); "
                                         r"raise tasks_per_repo to at least 6"):
        main(["plan", "--agent", "simulator", "--tasks", "48", "--seed", "0", "--out", str(out)])
    assert not out.exists()
    with pytest.raises(SystemExit, match=r"--agent: unknown agent 'repiar' \(did you mean 'repair'\?\)"):
        main(["plan", "--agent", "repiar", "--tasks", "1", "--seed", "0", "--out", str(out)])


def test_plan_of_a_simulated_study_holds_every_task_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    assert main(["plan", "--agent", "simulator", "--tasks", "5", "--seed", "0", "--out", str(out),
                 "--task-opt", "tasks_per_repo=2"]) == 0
    plan = Plan.load(out)
    assert len(plan.tasks) == 5 and plan.config.clock == "virtual"
