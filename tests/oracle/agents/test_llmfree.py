"""Every LLM-free family behind one agent; a full-table study of it on a Dask cluster."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.agents import BUILTIN_AGENTS, get_agent
from oracle.agents.llmfree import FAMILY_AGENTS, SHARES, LLMFreeAgent, split
from oracle.protocol import TaskSpec, clock_kind

REPO = Path(__file__).resolve().parents[3]


def test_split_apportions_by_weight() -> None:
    shipped = ("repair", "depres", "cbuild", "migrate")  # the shipped set's split, unchanged
    assert split(100, [SHARES[f] for f in shipped]) == [20, 30, 28, 22]
    assert list(FAMILY_AGENTS) == [*shipped, "bisect"]
    assert split(300, [SHARES[f] for f in FAMILY_AGENTS]) == [48, 73, 68, 53, 58]
    assert split(16, [1, 1, 1, 1]) == [4, 4, 4, 4] and split(5, [1, 1]) == [3, 2]
    assert sum(split(101, [0.2, 0.28, 0.28, 0.24])) == 101
    with pytest.raises(ValueError):
        split(3, [])


def test_every_family_agent_is_registered_and_built_in_a_fresh_process() -> None:
    names = ("repair", "depres", "cbuild", "migrate", "bisect", "llm-free")
    code = ("import json; from oracle.agents import get_agent; "
            "print(json.dumps({n: [get_agent(n).name, get_agent(n).granularity] for n in "
            f"{names!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True)
    built = json.loads(out.stdout)
    assert built == {n: [n, "turn"] for n in names}
    assert set(names) <= set(BUILTIN_AGENTS)
    assert LLMFreeAgent().families == tuple(FAMILY_AGENTS)
    assert clock_kind(get_agent("llm-free")) == "wall"


def test_tasks_of_every_family_and_dispatch_by_family(tmp_path: Path) -> None:
    agent = LLMFreeAgent(families=("depres", "cbuild", "migrate"))
    tasks = agent.make_tasks(7, 0, tmp_path, repos=6)
    fams = [t.family for t in tasks]
    assert sorted(set(fams)) == ["cbuild", "depres", "migrate"] and len(tasks) == 7
    assert len({t.repo for t in tasks}) == 6 and len({t.task_id for t in tasks}) == 7
    assert all(Path(t.workspace_template).is_relative_to(tmp_path / t.family) for t in tasks)
    assert agent._agent(tasks[0]).name == tasks[0].family  # noqa: SLF001 - the dispatch itself
    with pytest.raises(ValueError, match="family 'nope'"):
        agent.verify(TaskSpec("x", "r", "nope", None, None), tmp_path)
    with pytest.raises(ValueError, match="cannot cover"):
        agent.make_tasks(7, 0, tmp_path / "b", repos=2)
    with pytest.raises(ValueError, match="families must be"):
        LLMFreeAgent(families=("depres", "cooking"))


@pytest.mark.parametrize("family", list(FAMILY_AGENTS))
def test_eight_repositories_for_every_family(tmp_path: Path, family: str) -> None:
    """``--repos 8`` works for every family (beyond a declared list: generated variants),
    one task per repository; repair's eight are eight stdlib module families."""
    if family == "bisect" and shutil.which("git") is None:
        pytest.skip("git is needed to generate bisect tasks")
    agent = get_agent(family)
    opts = {"n_repos": 8} if family == "repair" else {"repos": 8}
    tasks = agent.make_tasks(8, 0, tmp_path, **opts)
    assert len({t.repo for t in tasks}) == 8 and len({t.task_id for t in tasks}) == 8
    assert {t.family for t in tasks} == {family}


def test_llm_free_deals_its_repositories_evenly_over_the_families(tmp_path: Path) -> None:
    fams = ("cbuild", "migrate", "bisect")  # the cheap generators (depres: above)
    tasks = LLMFreeAgent(families=fams).make_tasks(26, 0, tmp_path, repos=24)
    per: dict[str, set[str]] = {}
    for t in tasks:
        per.setdefault(t.family, set()).add(t.repo)
    assert {f: len(r) for f, r in per.items()} == dict.fromkeys(fams, 8)


@pytest.mark.slow
def test_full_table_study_on_a_dask_cluster_and_its_resume(tmp_path: Path) -> None:
    """A real distributed.LocalCluster (worker processes), reached by its address as
    ``--executor dask --scheduler ADDRESS`` does; a rerun resumes with nothing to do."""
    distributed = pytest.importorskip("distributed")
    from oracle.harness.branch import HarnessConfig, StudyContext
    from oracle.harness.executors import close_executor, make_executor
    from oracle.harness.study import freeze_plan, run_study

    agent = LLMFreeAgent(families=("migrate",))
    tasks = [t for t in agent.make_tasks(8, 0, tmp_path / "tasks", repos=1)
             if t.params["modules"] == 3][:1]
    assert tasks, "seed 0 gives three-module migration tasks"
    opts = {"granularity": "turn"}
    # seeded searches observe other probes than the nominal run: recorded, not quarantined,
    # as in experiments.collect_labels without --require-determinism
    config = HarnessConfig(require_obs_determinism=False)
    ctx = StudyContext("llm-free", opts, {t.task_id: t for t in tasks}, config, tmp_path / "study")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        ex = make_executor("dask", address=cluster.scheduler_address)
        try:
            plan = freeze_plan(ctx, tasks, "full", seed=0, repetitions=2, executor=ex)
            ls = run_study(plan, tmp_path / "study", executor=ex)
            n_records = len((tmp_path / "study" / "audit.jsonl").read_text().splitlines())
            again = run_study(plan, tmp_path / "study", executor=ex)
        finally:
            close_executor(ex)
    rec = ls.recovery
    assert len(rec) == 12 and rec["verified"].all() and not rec["quarantined"].any()
    assert set(zip(rec["restore_point"], rec["failure"], strict=True)) == {
        (r, f) for f in (1, 2, 3) for r in range(f)}
    assert (rec.groupby(["restore_point", "failure"]).size() == 2).all()
    assert ls.recovery_table(tasks[0].task_id).is_full()
    assert len((tmp_path / "study" / "audit.jsonl").read_text().splitlines()) == n_records
    assert again.content_hash() == ls.content_hash()
