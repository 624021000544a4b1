"""The main study: its argument parsing, and a smoke run of the real command (--quick)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from experiments.matched_budget import (
    QUICK,
    Args,
    format_table,
    parse_args,
    policies_for,
    summarise,
    verdict_line,
)
from ripplecp_policy.policy import Budget, Setting
from ripplecp_policy.verdicts import Verdict, compare

REPO = Path(__file__).resolve().parents[2]


def test_defaults_are_the_embedded_study():
    a = parse_args([])
    assert a == Args()
    assert a.budgets == ("count:1", "seconds:2x")
    assert set(a.families) == {"swe-pilot", "dependency-resolution", "multi-stage-build", "long-horizon",
                               "positive-control"}
    assert a.controls  # the controls are added to any simulated --families
    q = parse_args(["--quick"])
    assert q.quick and q.families == QUICK["families"] and q.n_resamples == QUICK["n_resamples"]
    # explicit options win over --quick's
    q2 = parse_args(["--quick", "--families", "swe-pilot", "--budgets", "count:1,bytes:2x", "--seed", "3"])
    assert q2.families == ("swe-pilot",) and q2.budgets == ("count:1", "bytes:2x") and q2.seed == 3
    off = parse_args(["--no-learned", "--no-mlflow"])
    assert off.learned is False and off.mlflow is False
    # with --labels, --quick leaves the families to the set (every family of it)
    assert parse_args(["--quick", "--labels", "."]).families == Args().families


def test_the_study_runs_the_registered_policies():
    from baselines import BASELINES
    from ripplecp_policy.learned import LEARNED

    study = [e.name for e in LEARNED if e.in_study]
    pols, learned = policies_for(parse_args(["--quick"]))
    assert [p.name for p in pols] == [e.name for e in BASELINES] + study and learned == study
    assert policies_for(parse_args(["--no-learned"]))[1] == []


def test_safe_metric_keys():
    from ripplecp_policy.tracking import metric_key

    assert metric_key("long-horizon/AdvantageRegressorPolicy[xgboost]/9.2s") == \
        "long-horizon/AdvantageRegressorPolicy_xgboost_/9.2s"


def test_verdict_line_says_no_plainly_and_keep_only_after_a_powered_no():
    from ripplecp_policy.verdicts import VerdictClass

    v = [Verdict("ridge", "first-boundary", "1ckpt", "no", "tfc", 3.0, -1.0, 7.0, scope="confirmatory",
                 verdict_class=VerdictClass.POWERED_NO, margin=20.0, mde=9.0, limit_diff=-30.0),
         Verdict("ridge", "first-boundary", "2ckpt", "no", "tfc", 1.0, -2.0, 4.0, scope="confirmatory",
                 verdict_class=VerdictClass.POWERED_NO, margin=20.0, mde=5.0, limit_diff=-30.0)]
    line = verdict_line("ridge", v)
    assert "beats first-boundary at matched budget: no — powered" in line and "keep first-boundary" in line
    assert "MDE 9 s" in line and "the limit's gain 30 s" in line
    v[1].verdict_class, v[1].mde, v[1].needed = VerdictClass.UNDERPOWERED, 50.0, "24 repositories x 4 tasks"
    line = verdict_line("ridge", v)  # an inconclusive "no" never says keep the simple rule
    assert "at matched budget: no —" in line and "keep" not in line and "under-powered" in line
    assert "MDE 50 s above the limit's gain 30 s" in line and "24 repositories x 4 tasks" in line
    v[0].status, v[0].verdict_class, v[0].high = "yes", VerdictClass.YES, -0.5
    assert "yes at 1ckpt only" in verdict_line("ridge", v)


def test_limits_and_references_are_marked_and_never_judged(make_label_set):
    """Verdicts are for online policies; the summary, the table and the plot mark offline
    limits and unmatched references as such, and the limits keep their distance to the bar."""
    from baselines import ClairvoyantOptimum, EveryBoundary, FirstBoundary, NoCheckpoint
    from ripplecp_policy.evaluation import Evaluator

    ls = make_label_set(n_repos=2, tasks_per_repo=2, seed=6)
    args = parse_args(["--quick"])
    ev = Evaluator(ls)
    res = pd.concat([ev.evaluate(p, ls.task_ids, Setting(Budget("count", k)))
                     for p in (FirstBoundary(), NoCheckpoint(), EveryBoundary(), ClairvoyantOptimum())
                     for k in (1, 2)], ignore_index=True)
    verdicts = compare(res, "first-boundary", n_resamples=500)
    assert {v.policy for v in verdicts} == {"no-checkpoint"}
    summary = summarise(res, verdicts, args).set_index(["policy", "budget"])
    assert summary.at[("optimum", "1ckpt"), "verdict"] == "offline limit"
    assert summary.at[("optimum", "1ckpt"), "diff"] <= 0  # the limit's distance to the bar is shown
    assert summary.at[("every-boundary", "1ckpt"), "verdict"] == "unmatched reference"
    assert summary.at[("no-checkpoint", "1ckpt"), "verdict"] in ("yes", "no")
    table = format_table(summary.reset_index())
    assert "optimum (offline limit)" in table and "every-boundary (unmatched reference)" in table


@pytest.mark.slow
def test_quick_study_reaches_the_mlflow_store(tmp_path):
    """Runs ``python -m experiments.matched_budget --quick`` for real and reads the store."""
    store, out = tmp_path / "mlruns", tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RIPPLECP_MLRUNS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.matched_budget", "--quick", "--mlruns", str(store),
         "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the headline first (issue 28, item 6): one table, family x primary budget, then the
    # controls' outcome; the long per-policy text in report.txt
    assert proc.stdout.startswith("== headline: TotalFailureCost per task (s) at the primary budget, 1ckpt")
    head = proc.stdout.split("\n\n")[0]
    assert "first-boundary" in head and "best simple rule" in head and "limit" in head
    assert "(a) learned vs first-boundary" in head and "(b) learned vs best simple" in head and "MDE" in head
    assert "controls:" in head and len(head.splitlines()) <= 4 + len(QUICK["families"])
    headline = pd.read_csv(out / "headline.csv")
    assert list(headline["family"]) == list(QUICK["families"]) and (headline["budget"] == "1ckpt").all()
    report = (out / "report.txt").read_text()
    assert report.startswith(head.split("\n")[0]) and "beats first-boundary at matched budget" in report
    assert "beats first-boundary at matched budget" not in proc.stdout
    # stderr is no terminal: one plain line per step, no carriage-return redraws
    assert "\r" not in proc.stderr and "folds (family x held-out repo): 6/6 done in " in proc.stderr
    assert "optimum (offline limit)" in report and "every-boundary (unmatched reference)" in report
    judged = set(pd.read_csv(out / "verdicts.csv")["policy"])
    assert judged and not judged & {"oracle", "optimum", "every-boundary"}
    families = QUICK["families"]
    for fam in families:
        assert f"== {fam}:" in report
        assert (out / f"budget_cost_{fam}.png").stat().st_size > 1000
    assert (out / "summary.csv").exists() and (out / "per_task.csv").exists()

    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(store))
    (exp,) = [e for e in client.search_experiments() if e.name == "matched-budget"]
    parents = client.search_runs([exp.experiment_id], "tags.`ripplecp.kind` = 'study'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["ripplecp.families"] == ",".join(families)
    children = client.search_runs(
        [exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'", max_results=5000)
    assert children and all(c.info.status == "FINISHED" for c in children)
    keys = {(c.data.tags["ripplecp.family"], c.data.tags["ripplecp.policy"],
             c.data.tags["ripplecp.budget"]) for c in children}
    assert len(keys) == len(children)  # one child per (family, policy, budget)
    policies = {k[1] for k in keys}
    assert {"first-boundary", "optimum", "random", "failure-risk"} <= policies
    assert {k[2] for k in keys} >= {"1ckpt", "2ckpt"}
    n_budgets = len(QUICK["budgets"])

    n_folds = QUICK["repos"] * len(families)  # one per repository
    assert len(children) == len(families) * len(policies) * n_budgets
    for c in children:  # leave-one-repository-out: every repository held out once, its history
        splits = c.data.tags["ripplecp.splits"].split(",")
        assert len(splits) == len(set(splits)) == n_folds // len(families)
        assert c.data.metrics["n_folds"] == len(splits)
        history = client.get_metric_history(c.info.run_id, "fold/total_failure_cost")
        assert sorted(m.step for m in history) == list(range(len(splits)))
    for c in children:
        assert len(c.data.tags["ripplecp.label_set_hash"]) == 64
        assert parent.data.tags[f"ripplecp.label_set_hash.{c.data.tags['ripplecp.family']}"] == \
            c.data.tags["ripplecp.label_set_hash"]
        m = c.data.metrics
        assert {"total_failure_cost", "regret_s", "spend", "lost_work_s"} <= set(m)
        assert m["regret_s"] >= -1e-6
        if c.data.tags["ripplecp.policy"] == "optimum":
            assert m["regret_s"] == pytest.approx(0.0, abs=1e-6)
    # the parent: a handful of headline metrics (issue 27: it carried thousands), the
    # verdict table and the other tables as artifacts
    fam = families[0]
    assert {"study_seconds", "verdicts_yes/a", "verdicts_yes/b", "verdicts_decided/a",
            f"{fam}/learned_vs_first_boundary", f"{fam}/limit_vs_first_boundary"} <= set(parent.data.metrics)
    assert len(parent.data.metrics) <= 6 + 2 * len(families)
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"summary.csv", "report.txt", "verdicts.csv", "curves"} <= arts
    # each child: a handful of metrics, the fold history, the verdicts of its learned policy,
    # and its place in the runs view (first-boundary first in each family and budget)
    for c in children:
        assert len(c.data.metrics) <= 15
        assert "vs_first_boundary" in c.data.metrics or c.data.tags["ripplecp.budget_matched"] == "False"
        assert c.data.tags["ripplecp.row"].endswith(" " + c.data.tags["ripplecp.policy"])
    rows = sorted(c.data.tags["ripplecp.row"] for c in children)
    assert rows[0].endswith(" first-boundary")
    from ripplecp_policy.learned import default_learned_policies

    learned_kids = [c for c in children if c.data.tags["ripplecp.policy"] in
                    {p.name for p in default_learned_policies(quick=True)}]
    from ripplecp_policy.verdicts import VerdictClass

    assert learned_kids and all(c.data.tags["ripplecp.verdict.a"].split(":")[0].removesuffix(" (exploratory)") in {k.value for k in VerdictClass}
                                for c in learned_kids)
    assert all("ripplecp.verdict.b" in c.data.tags for c in learned_kids)
    # the runs table opens on the comparison: a saved view (columns, order) the printed URL names
    view = json.loads(exp.tags["mlflow.sharedViewState.comparison"])
    assert "metrics.`vs_first_boundary`" in view["selectedColumns"] and view["orderByKey"] == "tags.`ripplecp.row`"
    assert "viewStateShareKey=comparison" in proc.stdout

    # as a researcher opens it (issue 16): the runs table first, every artifact in the store,
    # child runs with their policy's parameters and fitted values, the learned policies as models
    from ripplecp_policy.export import load_policy_model
    from ripplecp_policy.tracking import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert "workflowType=machine_learning" in proc.stdout and "--host 127.0.0.1" in proc.stdout
    home = (store / "artifacts").resolve().as_uri() + "/"
    assert all(e.artifact_location.startswith(home) for e in client.search_experiments())
    by = {(c.data.tags["ripplecp.policy"], c.data.tags["ripplecp.budget"], c.data.tags["ripplecp.family"]): c
          for c in children}
    for (pol, _b, _s), c in by.items():
        assert c.data.params, f"{pol}: a child run without params"
    tuned = [c for (pol, _b, _s), c in by.items() if pol in ("fixed-k", "time-tuned")]
    for c in tuned:  # a fitted value that differs between folds is there for every fold
        splits = c.data.tags["ripplecp.splits"].split(",")
        name = "k_" if "k_" in c.data.params else "interval_"
        per_fold = [k for k in c.data.params if k.startswith(f"{name}/")]
        assert not per_fold or sorted(per_fold) == sorted(f"{name}/{f}" for f in splits)
    fixed = [c for (pol, _b, _s), c in by.items() if pol == "fixed-k"]
    assert fixed and all(int(c.data.params["k_"]) >= 1 for c in fixed)
    timed = [c for (pol, _b, _s), c in by.items() if pol == "time-tuned"]
    assert timed and all(float(c.data.params["interval_"]) > 0 for c in timed)
    ridge = [c for (pol, _b, _s), c in by.items() if pol == "AdvantageRegressorPolicy[ridge]"]
    assert ridge and all(c.data.params["model"] == "ridge" and "threshold_" in c.data.params
                         for c in ridge)
    learned = {p.name for p in default_learned_policies(quick=True)}
    assert learned and learned <= policies
    models = client.search_logged_models(experiment_ids=[exp.experiment_id])
    got = {(m.tags["ripplecp.family"], m.tags["ripplecp.policy"], m.tags["ripplecp.budget"]) for m in models}
    # one per family, policy and budget
    assert got == {(f, p, b) for f in families for p in learned for b in {k[2] for k in keys}}
    assert len(models) == len(got)
    # named after what they are, and registered under that name
    from ripplecp_policy.tracking import model_name

    names = {model_name(m.tags["ripplecp.family"], m.tags["ripplecp.policy"], m.tags["ripplecp.budget"])
             for m in models}
    assert {m.name for m in models} == names and len(names) == len(models)
    assert {r.name for r in client.search_registered_models()} == names
    for m in models:
        run = client.get_run(m.source_run_id)  # the child run of that policy and budget
        assert run.data.tags["ripplecp.policy"] == m.tags["ripplecp.policy"]
        assert run.data.tags["ripplecp.budget"] == m.tags["ripplecp.budget"]
        assert m.params == run.data.params and m.params
        assert m.artifact_location.startswith(home)
        assert "MLmodel" in {a.path for a in client.list_logged_model_artifacts(m.model_id)}
    loaded = load_policy_model(models[0].model_uri, store)
    decided = loaded.predict(loaded.input_example)
    assert len(decided) == len(loaded.input_example) and decided["checkpoint"].dtype == bool

    # the study is listed by experiments.compare
    from experiments.compare import list_studies

    studies = list_studies(str(store))
    assert parent.info.run_id in set(studies["run_id"])
    listing = subprocess.run(
        [sys.executable, "-m", "experiments.compare", "--mlruns", str(store)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert listing.returncode == 0 and parent.info.run_id in listing.stdout


def test_more_repositories_than_a_family_declares(tmp_path):
    """``--repos`` beyond a family's 8 declared repositories: generated variants, one fold each."""
    from experiments.matched_budget import main

    out = tmp_path / "out"
    rc = main(["--families", "dependency-resolution", "--repos", "10", "--tasks-per-repo", "1",
               "--no-controls", "--no-learned", "--no-mlflow", "--no-shipped", "--budgets", "count:1",
               "--n-resamples", "200", "--random-seeds", "1", "--out", str(out)])
    assert rc == 0
    res = pd.read_csv(out / "per_task.csv")
    assert res["repo"].nunique() == 10 and res["fold"].nunique() == 10
    assert {"deps/variant-009", "deps/variant-010"} <= set(res["repo"])


def test_labels_option_reads_a_saved_label_set(tmp_path, make_label_set):
    from experiments.matched_budget import label_sets

    ls = make_label_set(n_repos=2, tasks_per_repo=2, seed=4)
    ls.save(tmp_path / "labels")
    data = label_sets(parse_args(["--labels", str(tmp_path / "labels")]))
    assert list(data) == ["synthetic"]  # the set's own family, since no simulated name matches
    assert sorted(data["synthetic"].task_ids) == sorted(ls.task_ids)
    assert data["synthetic"].content_hash() == ls.content_hash()


def test_best_simple_baseline_is_chosen_on_the_training_folds_only(make_label_set):
    """Bar (b): per fold and budget, the online simple baseline with the lowest mean
    training objective; its held-out rows come back as best-simple rows naming it."""
    from baselines import FirstBoundary, FixedK, NoCheckpoint
    from baselines.grid import training_objective
    from experiments.matched_budget import run_fold
    from ripplecp_policy.splits import leave_one_repo_out
    from ripplecp_policy.verdicts import BEST_SIMPLE

    ls = make_label_set(n_repos=3, tasks_per_repo=2, seed=2)
    settings = [Setting(Budget("count", 1)), Setting(Budget("count", 2))]
    args = parse_args(["--quick"])
    fold = next(iter(leave_one_repo_out(ls)))
    res, _ = run_fold("synthetic", ls, fold, [FirstBoundary(), NoCheckpoint(), FixedK()],
                   [(s.budget.label(), s) for s in settings], args)
    best = res[res["policy"] == BEST_SIMPLE]
    train = ls.subset(fold.train_tasks)
    for setting in settings:
        label = setting.budget.label()
        objectives = {p.name: training_objective(p.fit(train, setting), train, setting)
                      for p in (FirstBoundary(), NoCheckpoint(), FixedK())}
        want = min(objectives, key=objectives.get)
        got = best[best["budget"] == label]
        assert set(got["chosen"]) == {want}
        held = res[(res["policy"] == want) & (res["budget"] == label)]
        assert list(got["total_failure_cost"]) == list(held["total_failure_cost"])
        assert set(got["task_id"]) == set(fold.test_tasks)  # scored on the held-out tasks


@pytest.mark.parametrize("repetitions", [1, 2])
def test_the_table_prints_the_crossfitted_limit_beside_the_in_sample_one(make_label_set, repetitions):
    from baselines import ClairvoyantOptimum, FirstBoundary
    from ripplecp_policy.evaluation import Evaluator

    ls = make_label_set(n_repos=2, tasks_per_repo=2, repetitions=repetitions, seed=6)
    ev = Evaluator(ls)
    res = pd.concat([ev.evaluate(p, ls.task_ids, Setting(Budget("count", 1)))
                     for p in (FirstBoundary(), ClairvoyantOptimum())], ignore_index=True)
    summary = summarise(res, compare(res, "first-boundary", n_resamples=200), parse_args(["--quick"]))
    table = format_table(summary)
    assert "regret x-fit s" in table
    if repetitions == 1:
        assert summary["limit_in_sample"].all() and "in-sample only" in table
    else:
        assert not summary["limit_in_sample"].any() and "cross-fitted" in table
        opt = summary.set_index("policy").loc["optimum"]
        assert opt["xfit_regret"] == pytest.approx(opt["tfc"] - opt["xfit_limit"])


def test_relative_budgets_are_resolved_on_the_training_repositories_only(make_label_set):
    """seconds:2x is 2 x the mean creation seconds of the fold's training tasks: the held-out
    repository's checkpoints never set its own budget."""
    from baselines import FirstBoundary
    from experiments.matched_budget import run_fold
    from ripplecp_policy.policy import fold_settings
    from ripplecp_policy.splits import leave_one_repo_out

    ls = make_label_set(n_repos=3, tasks_per_repo=2, seed=2)
    args = parse_args(["--budgets", "count:1", "seconds:2x"])
    for fold in leave_one_repo_out(ls):
        train = ls.subset(fold.train_tasks)
        labelled = fold_settings(args.budgets, train, args.hazard)
        assert [label for label, _ in labelled] == ["1ckpt", "seconds:2x"]
        want = round(2 * float(train.checkpoints["creation_s"].mean()), 3)
        whole = round(2 * float(ls.checkpoints["creation_s"].mean()), 3)
        assert labelled[1][1].budget.amount == want != whole
        res, _ = run_fold("synthetic", ls, fold, [FirstBoundary()], labelled, args)
        secs = res[res["budget"] == "seconds:2x"]
        assert len(secs) and (secs["budget_amount"] == want).all()


_PLOT_ON_A_FULL_DISK = r"""
import resource, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import pandas as pd
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from experiments.matched_budget import REFERENCE, plot_curves
fig = plt.figure()  # fonts and caches loaded before the disk is full
fig.savefig(sys.argv[1] + "/../warm.png")
plt.close(fig)
summary = pd.DataFrame({"budget": ["1ckpt", "1ckpt"], "policy": [REFERENCE, "optimum"],
                        "tfc": [1.0, 0.5], "budget_matched": [True, True], "diff": [0.0, -0.5],
                        "diff_low": [0.0, -0.6], "diff_high": [0.0, -0.4]})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails: a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    plot_curves(summary, "fam", Path(sys.argv[1]))
    print("written")
except OSError as exc:
    print("refused", exc.errno, exc)
"""


def test_a_plot_on_a_full_disk_leaves_no_temp_file(tmp_path: Path) -> None:
    """Issue 32 item 10: budget_cost_<family>.tmp.png was left behind on a full disk."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "out"
    out.mkdir()
    res = subprocess.run([sys.executable, "-c", _PLOT_ON_A_FULL_DISK, str(out), str(repo)],
                         capture_output=True, text=True, timeout=300)
    assert res.stdout.startswith("refused"), res.stdout + res.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, "KILLED"), (signal.SIGINT, "KILLED")])
def test_a_stopped_study_ends_its_runs(tmp_path, sig, status):
    """Issue 27: the study ended its MLflow runs by hand, so one stopped by a signal left its
    parent RUNNING for ever. Stopped once its parent run exists, every run it opened ends
    KILLED and the command exits 130."""
    import time

    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import tracking_uri

    store = tmp_path / "mlruns"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # Ctrl-C's handler put back first: a shell's background job (CI's, a nohup'd run) starts
    # with SIGINT ignored, and Python then leaves it ignored (the study rightly keeps that)
    boot = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "sys.argv[0] = 'experiments.matched_budget'; "
            "runpy.run_module('experiments.matched_budget', run_name='__main__', alter_sys=True)")
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, "--quick", "--mlruns", str(store),
         "--out", str(tmp_path / "out"), "--jobs", "1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not _n_runs(store / "mlflow.db"):  # read-only: the study is still making the store
            assert proc.poll() is None, proc.stderr.read()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "no run within 300 s"
            time.sleep(0.5)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    client = MlflowClient(tracking_uri=tracking_uri(store))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs and {r.info.status for r in runs} == {status}


def _n_runs(db: Path) -> int:
    """Runs in the SQLite store ``db``, read without touching its schema (0 while absent)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return int(con.execute("SELECT count(*) FROM runs").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_the_headline_reads_class_and_mde_where_verdicts_carry_them():
    """Issue 28's verdicts carry a class and an MDE; today's carry a status. The headline
    reads either, in one place each."""
    from types import SimpleNamespace

    from experiments.matched_budget import verdict_class, verdict_mde

    plain = Verdict("ridge", "first-boundary", "1ckpt", "no", "tfc", 3.0, -1.0, 7.0)
    assert verdict_class(plain) == "no" and math.isnan(verdict_mde(plain)) and verdict_class(None) == "-"
    powered = SimpleNamespace(status="no", verdict_class="no — powered", mde=41.5)
    assert verdict_class(powered) == "no — powered" and verdict_mde(powered) == 41.5


@pytest.mark.parametrize("pos, null, says", [
    (("yes", "yes"), ("no", "no"), "positive (pc) yes on both bars; null (nl) no bar-(b) yes, as it should: verdicts informative"),
    (("yes", "no"), ("no", "no"), "every verdict of this study is uninformative"),
    (("yes", "yes"), ("yes", "yes"), "null (nl) a bar-(b) yes"),
    (None, None, "controls: none among the studied families"),
])
def test_the_controls_outcome_is_said_plainly(pos, null, says):
    """The headline's controls line reads the confirmatory verdicts of the control families
    through ripplecp_policy.controls (one rule, one home)."""
    import dataclasses

    from experiments.matched_budget import controls_line, study_controls

    def v(fam: str, bar: str, word: str) -> Verdict:
        return dataclasses.replace(Verdict("chosen-learned", bar, "1ckpt", word, "tfc", -3.0, -5.0, -1.0),
                                   family=fam, bar=bar, scope="confirmatory")

    verdicts = [v("f", "first-boundary", "no"), v("f", "best-simple", "no")]
    roles = {}
    if pos:
        verdicts += [v("pc", "first-boundary", pos[0]), v("pc", "best-simple", pos[1])]
        roles["pc"] = "positive"
    if null:
        verdicts += [v("nl", "first-boundary", null[0]), v("nl", "best-simple", null[1])]
        roles["nl"] = "null"
    assert says in controls_line(study_controls(verdicts, roles))
