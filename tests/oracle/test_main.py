"""``python -m oracle plan|run|audit``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labelsets.tables import LabelSet
from oracle.__main__ import (
    AuditArgs,
    InstallArgs,
    ListArgs,
    PlanArgs,
    RunArgs,
    audit_summary,
    main,
)
from oracle.harness.plan import Plan, PlanError
from oracle.store.audit import AuditLog
from ripplecp_cli import field_docs


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
    # a tampered plan is refused, in one line
    doc = json.loads(plan_path.read_text())
    doc["study_seed"] = 6
    plan_path.write_text(json.dumps(doc))
    assert main(["run", str(plan_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plan hash mismatch" in err
    with pytest.raises(PlanError, match="hash mismatch"):
        main(["run", str(plan_path), "--debug"])


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


def test_audit_of_missing_log_is_a_clear_error(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"python -m oracle audit: error: {tmp_path / 'audit.jsonl'}"
                                       ": no audit log\n")
    AuditLog(tmp_path / "audit.jsonl").append({"key": "x", "kind": "other"})
    assert main(["audit", str(tmp_path)]) == 0


def test_plan_refuses_a_task_count_the_agent_cannot_meet(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``--tasks 48`` of a 32-task simulated study is an error, never a 32-task plan."""
    out = tmp_path / "p.json"
    assert main(["plan", "--agent", "simulator", "--tasks", "48", "--seed", "0",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and (
        "python -m oracle plan: error: --tasks 48: agent 'sim:swe-pilot': 48 tasks asked for, "
        "the study holds 32 (8 repositories x 4 tasks); raise tasks_per_repo to at least 6") in err
    assert not out.exists()
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--agent", "repiar", "--tasks", "1", "--seed", "0", "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --agent: unknown agent 'repiar' (did you mean " \
        "'repair'?); known agents: " in err and "scripted" in err and "codex" in err


def test_plan_of_a_simulated_study_holds_every_task_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    assert main(["plan", "--agent", "simulator", "--tasks", "5", "--seed", "0", "--out", str(out),
                 "--task-opt", "tasks_per_repo=2"]) == 0
    plan = Plan.load(out)
    assert len(plan.tasks) == 5 and plan.config.clock == "virtual"


# ----------------------------------------------------------------------------- the command line

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "oracle", *args], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("words, cls", [
    (["plan"], PlanArgs), (["run"], RunArgs), (["audit"], AuditArgs),
    (["agents", "install"], InstallArgs), (["agents", "list"], ListArgs)])
def test_help_lists_every_option_with_its_help(words: list[str], cls: type) -> None:
    p = _cli(*words, "--help")
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert out.startswith(f"usage: python -m oracle {' '.join(words)}")
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("ripplecp_cli") or {}
        flag = f.name if meta.get("positional") else "--" + f.name.replace("_", "-")
        assert flag in out, (words, flag)
        assert docs.get(f.name) and " ".join(docs[f.name].split()[:4]) in out, (words, f.name)


def test_top_level_help_names_every_command() -> None:
    p = _cli("--help")
    assert p.returncode == 0 and all(c in p.stdout for c in ("plan", "run", "audit", "agents"))


@pytest.mark.parametrize("argv, needle", [
    (["plan", "--tasks", "0", "--seed", "0", "--out", "p.json"],
     "argument --tasks: must be >= 1, got 0"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--agent", "codx"],
     "argument --agent: unknown agent 'codx' (did you mean 'codex'?)"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--brain", "repiar"],
     "argument --brain: invalid choice 'repiar' (did you mean 'repair'?)"),
    (["run", "p.json", "--jobs", "0"], "argument --jobs: must be >= 1, got 0"),
    (["agnets", "list"], "unknown command 'agnets' (did you mean 'agents'?)"),
])
def test_wrong_arguments_are_one_line_exit_2_in_a_real_process(argv: list[str], needle: str) -> None:
    p = _cli(*argv)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and needle in p.stderr, p.stderr
    assert p.stderr.startswith("python -m oracle")


@pytest.mark.parametrize("argv, needle", [
    (["plan", "--tasks", "1", "--seed", "-1", "--out", "p.json"], "argument --seed: must be >= 0"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--design", "ful"],
     "argument --design: invalid choice 'ful' (did you mean 'full'?)"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--agent-opt", "novalue"],
     "argument --agent-opt: expected KEY=VALUE, got 'novalue'"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--executor", "dsk"],
     "argument --executor: invalid choice 'dsk' (did you mean 'dask'?)"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--workers", "2"],
     "unrecognized arguments: --workers 2"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--cap", "0"],
     "argument --cap: must be >= 0.001, got 0"),
    (["run", "p.json", "--executor", "thread"], "argument --executor: invalid choice 'thread'"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--design", "sparse"],
     "argument --design sparse: give exactly one of --branches and --branches-per-task"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--branches", "4"],
     "argument --branches/--branches-per-task: only for --design sparse, not pilot"),
    (["plan", "--tasks", "1", "--seed", "0", "--out", "p.json", "--design", "sparse",
      "--branches", "4", "--shares", "1", "2"], "argument --shares: three numbers >= 0"),
    (["run", "p.json", "--adaptive-branches", "-1"], "argument --adaptive-branches: must be >= 0"),
    (["agents", "install", "codx"], "argument names: invalid choice 'codx' (did you mean 'codex'?)"),
])
def test_wrong_arguments_are_one_line_exit_2(argv: list[str], needle: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_input_errors_found_after_parsing_are_one_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "p.json")
    cases = [
        (["plan", "--tasks", "1", "--seed", "0", "--out", out, "--agent", "scripted",
          "--brain", "repair"], "--brain: agent 'scripted' does not take it"),
        (["plan", "--tasks", "1", "--seed", "0", "--out", out, "--agent", "codex",
          "--brain", "scripted"], "brain 'scripted' needs a plan"),
        (["run", str(tmp_path / "nope.json")], "nope.json: cannot read plan"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
    assert not Path(out).exists()


def test_agents_list_shows_every_runtime(tmp_path: Path) -> None:
    p = _cli("agents", "list", "--json", env={"RIPPLECP_RUNTIMES": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["root"] == str(tmp_path.resolve())
    assert [r["runtime"] for r in doc["runtimes"]] == ["codex", "claude-code", "mini-swe-agent"]
    assert all(not r["usable"] and r["detail"] == "not installed" for r in doc["runtimes"])
    text = _cli("agents", "list", env={"RIPPLECP_RUNTIMES": str(tmp_path)}).stdout
    assert "codex" in text and "not usable: not installed" in text and "--agent codex" in text
    assert [r["agent"] for r in doc["runtimes"]] == ["codex", "claude-code", "mini-swe-agent"]


def test_agents_install_without_npm_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    p = _cli("agents", "install", "codex",
             env={"RIPPLECP_RUNTIMES": str(tmp_path / "rt"), "PATH": str(tmp_path / "bin")})
    assert p.returncode == 2
    assert p.stderr.splitlines()[-1] == ("python -m oracle agents install: error: cannot install "
                                         "codex: npm is not on PATH (install Node.js with npm)")


@pytest.mark.slow
def test_agents_install_is_idempotent_and_then_listed_usable() -> None:
    first = _cli("agents", "install", "codex", "claude-code")
    if first.returncode != 0:
        pytest.skip(f"the runtimes cannot be installed here: {first.stderr.strip()[-300:]}")
    again = _cli("agents", "install", "codex", "claude-code")
    assert again.returncode == 0 and again.stdout.count("usable") == 2, again.stderr
    assert again.stdout.count("already installed") == 2 and "installing" not in again.stderr
    rows = {r["runtime"]: r for r in json.loads(_cli("agents", "list", "--json").stdout)["runtimes"]}
    assert rows["codex"]["usable"] and rows["claude-code"]["usable"]
    assert rows["codex"]["installed"] == rows["codex"]["pinned"]


def test_repeated_option_flags_add_up_and_json_values_keep_their_commas() -> None:
    from oracle.__main__ import _kv, merge_repeated
    from ripplecp_cli import parse

    argv = merge_repeated(["--tasks", "1", "--task-opt", "n_repos=2", "--seed", "0",
                           "--task-opt", 'families={"a": ["x", "y"], "b": ["z"]}', "--out", "o",
                           "--task-opt=top_lines=3", "--agent-opt", "seeds=run", "fork=false"])
    a = parse(PlanArgs, argv, prog="t")
    assert _kv(a.task_opt) == {"n_repos": 2, "families": {"a": ["x", "y"], "b": ["z"]},
                               "top_lines": 3}
    assert _kv(a.agent_opt) == {"seeds": "run", "fork": False}
    assert a.tasks == 1 and a.seed == 0 and a.out == Path("o")
