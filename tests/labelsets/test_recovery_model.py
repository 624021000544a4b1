"""The recovery model and the sparse design: allocation, inclusion probabilities, the
doubly-robust price (unbiased whatever the model), cross-fitting by repository, the
adaptive choice."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.dummy import DummyRegressor

from labelsets.recovery_model import (
    CELL_STRATA,
    SparseDesign,
    cell_features,
    cell_stratum,
    complete,
    inclusion,
    is_sparse,
    next_cells,
    subsample,
    table_cells,
)
from oracle.simulator import simulate_label_set


@pytest.fixture(scope="module")
def full():
    return simulate_label_set("multi-stage-build", n_repos=3, tasks_per_repo=3, seed=2)


def test_strata_and_allocation() -> None:
    assert [cell_stratum(0, 3), cell_stratum(2, 3), cell_stratum(1, 3)] == list(CELL_STRATA)
    assert len(table_cells(4)) == 10 and len(table_cells(4, include_final=True)) == 15
    nb = {"a": 3, "b": 5}
    d = SparseDesign()
    pop = d.population(nb)
    assert {s: len(v) for s, v in pop.items()} == {"pristine": 8, "adjacent": 6, "long": 7}
    cells, probs = d.choose(nb, 8, seed=1)
    assert len(cells) == len(set(cells)) == 8
    k = {s: sum(cell_stratum(r, f) == s for _, r, f in cells) for s in CELL_STRATA}
    assert k == {"pristine": 4, "adjacent": 2, "long": 2}  # the shares 1/2, 1/4, 1/4
    assert probs == {s: k[s] / len(pop[s]) for s in CELL_STRATA}
    # a full stratum's excess goes to the others; the budget is never exceeded
    cells, probs = SparseDesign(shares=(1, 0, 0)).choose(nb, 12, seed=1)
    assert len(cells) == 12 and probs["pristine"] == 1.0 and 0 < probs["adjacent"] + probs["long"]
    cells, probs = d.choose(nb, 100, seed=1)
    assert len(cells) == 21 and set(probs.values()) == {1.0}
    with pytest.raises(ValueError, match="shares"):
        SparseDesign(shares=(0, 0, 0))


def test_subsample_keeps_the_drawn_cells_and_records_inclusion(full) -> None:
    sp = subsample(full, 30, seed=5)
    assert is_sparse(sp) and not is_sparse(full)
    assert len(sp.recovery) == 30 and sp.labels.empty  # one repetition per drawn cell
    pi = inclusion(sp)
    probs = sp.provenance["sparse"]["inclusion"]
    for row in sp.recovery.itertuples():
        assert pi(row.task_id, row.restore_point, row.failure) == probs[cell_stratum(row.restore_point, row.failure)]
    assert inclusion(full)("x", 0, 1) == 1.0
    # the provenance travels with every subset, and the loader round-trips it
    sub = sp.subset(sp.task_ids[:3])
    assert is_sparse(sub) and sub.provenance["sparse"] == sp.provenance["sparse"]


def test_the_cells_own_value_is_never_an_input(full) -> None:
    sp = subsample(full, 40, seed=1)
    cf = cell_features(sp)
    row = cf[cf["n"] > 0].iloc[0]
    bumped = sp.recovery.copy()
    hit = (bumped["task_id"] == row["task_id"]) & (bumped["restore_point"] == row["r"]) & \
        (bumped["failure"] == row["f"])
    bumped.loc[hit, "cost_s"] += 1e4
    sp2 = type(sp)(sp.tasks, sp.checkpoints, bumped, sp.labels, sp.trajectories, sp.provenance)
    cf2 = cell_features(sp2)
    same = (cf2["task_id"] == row["task_id"]) & (cf2["r"] == row["r"]) & (cf2["f"] == row["f"])
    own = [c for c in cf.columns if c.startswith("own__")]
    assert np.allclose(cf.loc[same, own].to_numpy(float), cf2.loc[same, own].to_numpy(float),
                       equal_nan=True)
    assert cf2.loc[same, "y"].iloc[0] == pytest.approx(row["y"] + 1e4)


def test_never_fitted_on_the_repository_it_prices(full) -> None:
    sp = subsample(full, 60, seed=2)
    comp = complete(sp)
    assert comp.groups == "repo" and set(comp.models) == set(sp.repos)
    repo = sp.repos[0]
    ids = set(sp.tasks.loc[sp.tasks["repo"] == repo, "task_id"])
    bumped = sp.recovery.copy()
    bumped.loc[bumped["task_id"].isin(ids), "cost_s"] *= 5  # this repository's measurements
    sp2 = type(sp)(sp.tasks, sp.checkpoints, bumped, sp.labels, sp.trajectories, sp.provenance)
    comp2 = complete(sp2)
    x = comp.cells
    # the model that prices this repository learned nothing from its measurements (they
    # enter its prices only as the task's own inputs and the doubly-robust correction) ...
    assert np.allclose(comp.models[repo].predict(x), comp2.models[repo].predict(x))
    # ... while the other repositories' models learned from them
    other = next(r for r in sp.repos if r != repo)
    assert not np.allclose(comp.models[other].predict(x), comp2.models[other].predict(x))


def test_doubly_robust_price_is_unbiased_even_with_a_useless_model(full) -> None:
    """Over the design's draws the completed price of a fixed placement averages to the full
    table's with a model that is plainly wrong - it predicts 0 s for every cell, so the
    correction does all the work - while the plug-in price (measured where executed, the
    model elsewhere) is far off."""
    truth = full.recovery.groupby(["task_id", "restore_point", "failure"])["cost_s"].mean()
    nb = dict(zip(full.tasks["task_id"], full.tasks["n_boundaries"], strict=True))

    def price(j: pd.Series) -> float:  # no checkpoint before f <= 2, a checkpoint at 2 after
        return float(sum(j[(t, 0 if f <= 2 else 2, f)] for t, b in nb.items() for f in range(1, b + 1)))

    want = price(truth)
    dr, plug = [], []
    for seed in range(30):
        c = complete(subsample(full, 45, seed=seed), DummyRegressor(strategy="constant", constant=0.0)).cells.set_index(["task_id", "r", "f"])
        dr.append(price(c["j"]))
        plug.append(price(c["y"].where(c["executed"], c["m"])))
    for got, unbiased in ((np.array(dr), True), (np.array(plug), False)):
        se = got.std(ddof=1) / np.sqrt(len(got))
        assert (abs(got.mean() - want) < 3.5 * se) == unbiased, (unbiased, got.mean(), want, se)


def test_halves_need_two_repetitions_of_every_executed_cell(full) -> None:
    one = complete(subsample(full, 40, seed=3))
    assert one.halves(one.cells["task_id"].iloc[0]) is None
    two = complete(subsample(full, 40, seed=3, design=SparseDesign(repetitions=2)))
    h = two.halves(two.cells["task_id"].iloc[0])
    assert h is not None and len(h[0]) == len(h[1])


def test_next_cells_are_unexecuted_deterministic_and_respect_exclusions(full) -> None:
    sp = subsample(full, 40, seed=4)
    comp = complete(sp)
    first = next_cells(sp, 5, comp)
    assert first == next_cells(sp, 5, comp) and len(first) == 5
    executed = set(zip(comp.cells.loc[comp.cells["executed"], "task_id"],
                       comp.cells.loc[comp.cells["executed"], "r"],
                       comp.cells.loc[comp.cells["executed"], "f"], strict=True))
    assert not set(first) & executed
    again = next_cells(sp, 5, comp, exclude=first[:2])
    assert not set(first[:2]) & set(again) and set(first[2:]) <= set(again)


def test_adaptive_cells_are_measured_with_certainty_and_shift_their_strata(full) -> None:
    sp = subsample(full, 30, seed=6)
    rec = sp.provenance["sparse"]
    pi0 = inclusion(sp)
    nb = dict(zip(sp.tasks["task_id"], sp.tasks["n_boundaries"], strict=True))
    pop = SparseDesign().population(nb)
    drawn = set(zip(sp.recovery["task_id"], sp.recovery["restore_point"], sp.recovery["failure"], strict=True))
    extra = [c for c in pop["long"] if c not in drawn][:2]
    prov = {**sp.provenance, "sparse": {**rec, "adaptive": [f"{t}:r{r}:f{f}" for t, r, f in extra]}}
    sp2 = type(sp)(sp.tasks, sp.checkpoints, sp.recovery, sp.labels, sp.trajectories, prov)
    pi = inclusion(sp2)
    assert [pi(*c) for c in extra] == [1.0, 1.0]
    k = rec["inclusion"]["long"] * len(pop["long"])
    other = next(c for c in pop["long"] if c not in extra)
    assert pi(*other) == pytest.approx(k / (len(pop["long"]) - 2)) and pi(*other) > pi0(*other)
    first = next(c for c in pop["pristine"])
    assert pi(*first) == pi0(*first)
