"""The main study: its argument parsing, and a smoke run of the real command (--quick)."""

from __future__ import annotations

import os
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
    safe_key,
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
    assert safe_key("long-horizon/AdvantageRegressorPolicy[xgboost]/9.2s") == \
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
    assert "beats first-boundary at matched budget" in proc.stdout
    # stderr is no terminal: one plain line per step, no carriage-return redraws
    assert "\r" not in proc.stderr and "folds (family x held-out repo): 6/6 done in " in proc.stderr
    assert "optimum (offline limit)" in proc.stdout and "every-boundary (unmatched reference)" in proc.stdout
    judged = set(pd.read_csv(out / "verdicts.csv")["policy"])
    assert judged and not judged & {"oracle", "optimum", "every-boundary"}
    families = QUICK["families"]
    for fam in families:
        assert f"== {fam}:" in proc.stdout
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
    assert any(k.endswith("first-boundary/1ckpt/tfc") for k in parent.data.metrics)
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"summary.csv", "report.txt", "curves"} <= arts

    # as a researcher opens it (issue 16): the runs table first, every artifact in the store,
    # child runs with their policy's parameters and fitted values, the learned policies as models
    from ripplecp_policy.export import load_policy_model
    from ripplecp_policy.learned import default_learned_policies
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
    from experiments.matched_budget import load_label_sets

    ls = make_label_set(n_repos=2, tasks_per_repo=2, seed=4)
    ls.save(tmp_path / "labels")
    data = load_label_sets(parse_args(["--labels", str(tmp_path / "labels")]))
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
    from experiments.matched_budget import fold_settings, run_fold
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
