"""The study runner: exact virtual-clock studies, the third-repetition rule, records written
as branches finish, and nothing lost when a real study is SIGKILLed at random moments."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import oracle.harness.study as study_mod
from labelsets.tables import LabelSet
from oracle.harness.branch import HarnessConfig
from oracle.harness.executors import InlineExecutor
from oracle.harness.plan import Plan, full_table_plan, pilot_plan
from oracle.harness.study import run_study
from oracle.store.audit import AuditLog

REPO = Path(__file__).resolve().parents[3]
DETERMINISTIC = ("role", "restore_point", "failure", "repetition", "seed", "pair_id", "cell_id",
                 "task_id", "verified", "state_digest", "obs_digest", "drive_struck",
                 "drive_boundary", "quarantined", "plan_hash", "order")


def _run(plan: Path, study: Path, extra: list[str] | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-m", "oracle", "run", str(plan), "--study", str(study),
         "--executor", "inline", "--no-progress", *(extra or [])],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


PROGRESS_LIMIT_S = 600.0


def _wait_for_progress(p: subprocess.Popen, audit: Path, before: int, *, limit_s: float) -> bool:
    """Poll until the runner appended an audit line past ``before`` or exited.

    Returns False only when neither happened within ``limit_s`` (a hung runner)."""
    give_up = time.monotonic() + limit_s
    while p.poll() is None and _lines(audit) <= before:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.01)
    return True


def test_study_killed_at_random_moments_resumes_exactly(tmp_path: Path, scripted_plan) -> None:
    plan_path = scripted_plan(2, 21)
    plan = Plan.load(plan_path)
    base = plan_path.with_name("plan.study")
    a, b = tmp_path / "A", tmp_path / "B"
    shutil.copytree(base, a)
    shutil.copytree(base, b)

    # uninterrupted reference run (in this process: same code path as the CLI's inline run)
    run_study(plan, a, executor=InlineExecutor())

    # interrupted run: SIGKILL the whole runner at seeded random moments after progress
    rng = random.Random(20260818)
    audit_b = b / "audit.jsonl"
    kills, partial = 0, []
    while kills < 3:
        before = _lines(audit_b)
        p = _run(plan_path, b)
        # Kill only after this attempt made progress (a new audit line), however slow a
        # loaded machine makes start-up: a kill before any progress would test nothing.
        # The long limit only turns a hung runner into a clear failure, never into a kill.
        if not _wait_for_progress(p, audit_b, before, limit_s=PROGRESS_LIMIT_S):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise AssertionError(f"runner made no progress in {PROGRESS_LIMIT_S} s "
                                 f"(audit lines {before}): {p.stderr.read().decode()[-3000:]}")
        if p.poll() is not None:
            _, err = p.communicate()
            assert p.returncode == 0, err.decode()[-3000:]
            break  # finished before we could interrupt it
        time.sleep(rng.uniform(0.0, 0.3))
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        partial.append(_lines(audit_b))
        assert partial[-1] > before, (before, partial)  # every kill came after progress
    assert kills >= 2, f"study finished too fast to interrupt (kills={kills})"
    p = _run(plan_path, b)
    _, err = p.communicate(timeout=PROGRESS_LIMIT_S)
    assert p.returncode == 0, err.decode()[-2000:]

    ra = {r["key"]: r for r in AuditLog(a / "audit.jsonl").records()}
    rb_list = AuditLog(audit_b).records()
    rb = {r["key"]: r for r in rb_list}
    assert len(rb) == len(rb_list) == _lines(audit_b)  # no duplicate, no torn line left
    total = len(rb)
    assert all(0 < n < total for n in partial[:1]), (partial, total)  # first kill was mid-study
    # every planned branch of the first two repetitions is there, in both runs, once
    planned = {s.branch_id for s in plan.branch_specs((1, 2))}
    branch_a = {k for k, r in ra.items() if r["kind"] == "branch"}
    branch_b = {k for k, r in rb.items() if r["kind"] == "branch"}
    assert planned <= branch_a and planned <= branch_b
    for key in planned | {k for k in ra if k.startswith("nominal/")}:
        for f in DETERMINISTIC:
            assert ra[key].get(f) == rb[key].get(f), (key, f, ra[key].get(f), rb[key].get(f))
    # third repetitions: present exactly where each run's own first two advantages differ in sign
    for recs in (ra, rb):
        nominal = {r["task_id"]: r for r in recs.values() if r["kind"] == "nominal"}
        for cell in plan.pair_cells():
            c = plan.cell(cell)
            creation = next(x["creation_s"] for x in nominal[c["task_id"]]["checkpoints"]
                            if x["boundary"] == c["candidate"])
            adv = []
            for k in (1, 2):
                by = {recs[f"{cell}:rep{k}/{i}"]["role"]: recs[f"{cell}:rep{k}/{i}"] for i in (0, 1)}
                adv.append(by["skip"]["cost_s"] - by["cp"]["cost_s"] - creation)
            has3 = f"{cell}:rep3/0" in recs and f"{cell}:rep3/1" in recs
            assert has3 == (np.sign(adv[0]) != np.sign(adv[1])), (cell, adv)
    # the label set was built from the audit log and agrees with it
    ls_json = json.loads((b / "labelset" / "label_set.json").read_text())
    assert ls_json["n_branches"] == len(branch_b)


def test_virtual_clock_study_costs_are_exact(tmp_path: Path, toy_tasks, toy_step_s) -> None:
    tasks = toy_tasks(2)
    cfg = HarnessConfig(clock="virtual")
    plan = full_table_plan(tasks, {t.task_id: 3 for t in tasks}, seed=1, agent="toy-virtual",
                           config=cfg, repetitions=1)
    ls = run_study(plan, tmp_path / "study")
    rt = ls.recovery_table("toy0")
    assert rt.is_full() and len(ls.recovery) == 2 * 6 and len(ls.labels) == 0
    # noise-free: J(r, f) = 0.5 re-orientation (r > 0) + the nominal work from r to the end
    for r, f in [(0, 1), (0, 3), (1, 2), (2, 3)]:
        want = (0.5 if r else 0.0) + sum(toy_step_s[r:])
        assert rt.cost(r, f) == pytest.approx(want)
    assert rt.creation_s(2) == 0.25 and rt.size_bytes(2) == 2000
    assert rt.nominal_t(2) == pytest.approx(7.0)
    assert (ls.recovery["restore_latency_s"] == 0.125).all()  # the simulated latency
    assert ls.recovery["verified"].all() and not ls.recovery["quarantined"].any()
    again = LabelSet.load(tmp_path / "study" / "labelset")
    assert again.content_hash() == ls.content_hash()



def test_pilot_study_labels_and_third_repetition_rule(tmp_path: Path, toy_tasks) -> None:
    tasks = toy_tasks(4)
    plan = pilot_plan(tasks, {t.task_id: 3 for t in tasks}, seed=3, agent="toy-noisy",
                      config=HarnessConfig(clock="virtual"))
    ls = run_study(plan, tmp_path / "study")
    labels = ls.labels
    assert set(labels["stratum"]) == {"first", "additional"}
    # the predeclared rule, checked against the recorded first two repetitions
    n_third = 0
    for cell_id, g in labels.groupby("cell_id"):
        adv = dict(zip(g["repetition"], g["advantage"], strict=True))
        unstable = np.sign(adv[1]) != np.sign(adv[2])
        assert (3 in adv) == unstable, cell_id
        n_third += unstable
    assert n_third >= 1  # the noisy agent makes some cells sign-unstable
    assert len(ls.recovery) == 2 * len(labels)
    # j_cp is charged the checkpoint's creation cost
    row = labels.iloc[0]
    assert row["j_cp"] == pytest.approx(
        float(ls.recovery.set_index("branch_id").loc[
            ls.recovery[(ls.recovery["pair_id"] == f"{row['cell_id']}:rep{row['repetition']}")
                        & (ls.recovery["role"] == "cp")]["branch_id"].iloc[0], "cost_s"]) + 0.25)
    # resuming a finished study runs nothing new and yields the same tables
    again = run_study(plan, tmp_path / "study")
    assert again.content_hash() == ls.content_hash()



def test_inline_study_records_each_branch_before_starting_the_next(scripted_plan, monkeypatch):
    """No finished branch waits unrecorded: a kill between branches loses nothing."""
    plan_path = scripted_plan(1, 3)
    plan = Plan.load(plan_path)
    study = plan_path.with_name("plan.study")
    seen: list[int] = []
    real = study_mod.run_branch

    def spy(spec, ctx):
        seen.append(len(AuditLog(study / "audit.jsonl").records()))
        return real(spec, ctx)

    monkeypatch.setattr(study_mod, "run_branch", spy)
    study_mod.run_study(plan, study, executor=InlineExecutor())
    assert len(seen) >= 8
    assert seen == list(range(seen[0], seen[0] + len(seen))), seen


def _marked(marker: str) -> list[int]:
    from oracle.processes import processes_with_env

    return processes_with_env("RIPPLECP_TEST_MARK", marker)


@pytest.mark.slow
def test_a_killed_study_runner_leaves_no_process_and_no_worker_starts_a_branch(
        tmp_path: Path) -> None:
    """SIGKILL of ``python -m oracle run --jobs 2`` (its pid only, as a shell's ``kill -9 $!``)
    leaves neither pool workers, the forkserver, the resource tracker nor an agent; no branch
    starts after the runner is gone; a rerun finishes the study."""
    from oracle.__main__ import main

    plan = tmp_path / "p.json"
    assert main(["plan", "--agent", "scripted", "--tasks", "2", "--seed", "0", "--out", str(plan),
                 "--task-opt", "time_scale=1.5", "--task-opt", "n_files=3",
                 "--no-progress"]) == 0
    study = tmp_path / "p.study"
    marker = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=str(REPO), RIPPLECP_TEST_MARK=marker)
    p = subprocess.Popen([sys.executable, "-m", "oracle", "run", str(plan), "--jobs", "2",
                          "--no-progress"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    branches = study / "branches"
    give_up = time.monotonic() + PROGRESS_LIMIT_S
    # both workers are inside a branch, each with its agent program running
    while not (branches.is_dir() and len(list(branches.iterdir())) >= 2
               and sum("oracle.agents.scripted" in Path(f"/proc/{q}/cmdline").read_bytes().decode(
                   errors="replace") for q in _marked(marker) if Path(f"/proc/{q}").exists()) >= 2):
        assert p.poll() is None, "the study finished before it could be killed"
        assert time.monotonic() < give_up, "the runner started no branch"
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    end = time.monotonic() + 10
    while _marked(marker) and time.monotonic() < end:
        time.sleep(0.05)
    left = [Path(f"/proc/{q}/cmdline").read_bytes().replace(b"\0", b" ")[:100]
            for q in _marked(marker)]
    assert left == [], left
    # a branch the workers were starting while the kill landed may exist; once the runner and
    # every process of the study are gone, nothing starts another
    before = set(branches.iterdir())
    time.sleep(1.0)
    assert set(branches.iterdir()) == before  # nothing started once the runner was gone
    done = subprocess.run([sys.executable, "-m", "oracle", "run", str(plan), "--jobs", "2",
                           "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=PROGRESS_LIMIT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not _marked(marker)
    ls = LabelSet.load(study / "labelset")
    assert {s.branch_id for s in Plan.load(plan).branch_specs((1, 2))} <= set(ls.recovery["branch_id"])


def _sparse_plan(tmp_path: Path, branches: int = 6) -> Path:
    from oracle.__main__ import main

    path = tmp_path / "sparse.json"
    assert main(["plan", "--agent", "scripted", "--tasks", "2", "--design", "sparse",
                 "--branches", str(branches), "--seed", "5", "--out", str(path), "--no-progress",
                 "--task-opt", "time_scale=0.1", "--task-opt", "n_files=2",
                 "--task-opt", "n_steps=3"]) == 0
    return path


def test_adaptive_sparse_study_killed_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """``oracle run --adaptive-branches`` SIGKILLed at seeded random moments, then resumed:
    each round is chosen once (its record precedes its branches), every planned and every
    chosen branch is in the audit log exactly once, nothing else is, and the budget holds."""
    plan_path = _sparse_plan(tmp_path)
    plan = Plan.load(plan_path)
    study = plan_path.with_name("sparse.study")
    audit_path = study / "audit.jsonl"
    extra = ["--adaptive-branches", "4", "--adaptive-batch", "2"]
    rng = random.Random(29)
    kills = 0
    while kills < 3:
        before = _lines(audit_path)
        p = _run(plan_path, study, extra)
        if not _wait_for_progress(p, audit_path, before, limit_s=PROGRESS_LIMIT_S):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise AssertionError(f"runner made no progress: {p.stderr.read().decode()[-3000:]}")
        if p.poll() is not None:
            _, err = p.communicate()
            assert p.returncode == 0, err.decode()[-3000:]
            break
        time.sleep(rng.uniform(0.0, 0.3))
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
    p = _run(plan_path, study, extra)
    _, err = p.communicate(timeout=PROGRESS_LIMIT_S)
    assert p.returncode == 0, err.decode()[-2000:]
    assert kills >= 1, "the study finished before it could be interrupted"

    recs = AuditLog(audit_path).records()
    keys = [r["key"] for r in recs]
    assert len(keys) == len(set(keys)) == _lines(audit_path)  # no duplicate, no torn line
    rounds = sorted((r for r in recs if r["kind"] == "adaptive"), key=lambda r: r["round"])
    assert [r["round"] for r in rounds] == list(range(len(rounds))) and rounds
    chosen = [tuple(c) for r in rounds for c in r["cells"]]
    assert len(chosen) == len(set(chosen)) and 0 < len(chosen) * plan.repetitions <= 4
    want = {s.branch_id for s in plan.branch_specs((1,))}
    want |= {s.branch_id for s in plan.adaptive_specs(chosen)}
    got = {r["key"] for r in recs if r["kind"] == "branch"}
    assert got == want
    # each round was recorded before any of its branches
    pos = {k: i for i, k in enumerate(keys)}
    for r in rounds:
        assert all(pos[s.branch_id] > pos[r["key"]] for s in plan.adaptive_specs(r["cells"]))
    from oracle.__main__ import audit_summary

    assert [r["round"] for r in audit_summary(recs)["adaptive_rounds"]] == [r["round"] for r in rounds]
    ls = LabelSet.load(study / "labelset")
    assert len(ls.recovery) == len(want)
    assert ls.provenance["sparse"]["adaptive"] == sorted(f"{t}:r{r}:f{f}" for t, r, f in chosen)
