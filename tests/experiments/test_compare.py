"""``python -m experiments.compare``: list studies and compare two runs from the store."""

from __future__ import annotations

import pytest

from experiments.compare import compare_runs, list_studies, main


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with two studies (as experiments.matched_budget tags them) and a child run."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from ripplecp_policy.tracking import ensure_experiment, tracking_uri

    root = tmp_path_factory.mktemp("mlruns")
    exp = ensure_experiment("matched-budget", root)
    client = MlflowClient(tracking_uri=tracking_uri(root))
    ids = []
    for i, (fam, tfc) in enumerate((("swe-pilot", 100.0), ("swe-pilot,long-horizon", 90.0))):
        run = client.create_run(exp, tags={"ripplecp.kind": "study", "ripplecp.families": fam,
                                           "ripplecp.label_set_hash": f"h{i}"})
        client.log_batch(run.info.run_id, metrics=[
            Metric("swe-pilot/first-boundary/1ckpt/tfc", tfc, 0, 0),
            Metric(f"only{i}", 1.0, 0, 0)])
        client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
    child = client.create_run(exp, tags={"mlflow.parentRunId": ids[0], "ripplecp.kind": "fold"})
    client.set_terminated(child.info.run_id)
    return root, ids


def test_lists_studies_newest_first(store, capsys):
    root, ids = store
    df = list_studies(str(root))
    assert list(df["run_id"]) == ids[::-1]  # parent runs only, newest first
    assert list(df["families"]) == ["swe-pilot,long-horizon", "swe-pilot"]
    assert main(["--mlruns", str(root)]) == 0
    out = capsys.readouterr().out
    assert ids[0] in out and ids[1] in out and "h1" in out


def test_compares_two_runs_by_prefix(store, capsys):
    root, ids = store
    table = compare_runs(ids[0][:10], ids[1], str(root)).set_index("metric")
    assert table.loc["swe-pilot/first-boundary/1ckpt/tfc", "diff"] == pytest.approx(-10.0)
    assert table.loc["only0", "a"] == 1.0 and table.loc["only0", "b"] != table.loc["only0", "b"]
    assert main([ids[0], ids[1], "--mlruns", str(root), "--filter", "tfc"]) == 0
    out = capsys.readouterr().out
    assert "first-boundary/1ckpt/tfc" in out and "only0" not in out


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """Two studies as experiments.matched_budget logs them (ripplecp_policy.tracking): a
    handful of headline metrics, and a child run per (family, policy, budget) with its
    verdicts as tags; most values equal, a few changed."""
    from ripplecp_policy.tracking import study_run

    root = tmp_path_factory.mktemp("studies")
    ids = []
    for seed in (0, 1):
        with study_run("matched-budget", root, name=f"s{seed}", tags={"ripplecp.families": "f,g"}) as p:
            p.log({"study_seconds": 100.0 + seed, "verdicts_yes/a": 1.0 + seed, "verdicts_decided/a": 4.0})
            for fam in ("f", "g"):
                for pol in ("first-boundary", "ridge"):
                    for budget in ("1ckpt", "2ckpt"):
                        tags = {"ripplecp.family": fam, "ripplecp.policy": pol, "ripplecp.budget": budget}
                        if pol == "ridge":
                            flip = seed and fam == "g" and budget == "1ckpt"
                            tags |= {"ripplecp.verdict.a": "yes" if flip else "no", "ripplecp.verdict.b": "no"}
                        with p.child(f"{fam}/{pol}/{budget}", tags=tags) as kid:
                            moved = 5.0 if seed and (fam, budget) == ("f", "2ckpt") and pol == "ridge" else 0.0
                            kid.log({"vs_first_boundary": -3.0 + moved, "total_failure_cost": 50.0})
        ids.append(p.run_id)
    return root, ids


def test_two_studies_print_what_changed_not_everything(studies, capsys):
    root, (a, b) = studies
    assert main([a, b, "--mlruns", str(root), "--metric", "vs_first_boundary"]) == 0
    out = capsys.readouterr().out
    assert "study_seconds" in out and "verdicts_yes/a" in out
    assert "verdicts_decided/a" not in out and "1 the same in both" in out  # unchanged: counted
    assert "verdicts that changed (1):" in out
    (line,) = [ln for ln in out.splitlines() if ln.split()[:4] == ["g", "ridge", "1ckpt", "a"]]
    assert line.split()[4:] == ["no", "yes"]
    assert "vs_first_boundary per child run, where it changed (1 of 8)" in out
    (row,) = [ln.split() for ln in out.splitlines() if ln.split()[:3] == ["f", "ridge", "2ckpt"]]
    assert row[3:] == ["-3", "2", "5"]  # A, B, B - A
    assert "nan" not in out.lower()
    assert len(out.splitlines()) < 30
    assert main([a, b, "--mlruns", str(root), "--all"]) == 0
    assert "verdicts_decided/a" in capsys.readouterr().out


def test_unknown_run_is_a_clear_error(store):
    root, _ = store
    with pytest.raises(LookupError, match="0 runs match"):
        compare_runs("zzzz", "yyyy", str(root))


def test_reading_never_creates_a_store(tmp_path):
    with pytest.raises(FileNotFoundError, match="no MLflow store at"):
        list_studies(str(tmp_path / "none"))
    assert not (tmp_path / "none").exists()
