"""The controls' rule: the positive control must say yes on both bars, the null must not
say yes on bar (b); a study whose positive control fails labels every verdict."""

from __future__ import annotations

from functools import partial

from ripplecp_policy.controls import controls_outcome as _outcome
from ripplecp_policy.controls import mark_uninformative
from ripplecp_policy.verdicts import Verdict

controls_outcome = partial(_outcome, positive="positive-control", null="long-horizon")


def _v(family: str, bar: str, status: str, policy: str = "xgboost", budget: str = "1ckpt",
       **kw: object) -> Verdict:
    v = Verdict(policy=policy, reference=bar, budget=budget, status=status, metric="total_failure_cost",
                bar=bar, family=family)
    for k, x in kw.items():
        setattr(v, k, x)
    return v


def _study(pos_a: str, pos_b: str, null_b: str) -> list[Verdict]:
    return [
        _v("positive-control", "first-boundary", pos_a), _v("positive-control", "best-simple", pos_b),
        _v("long-horizon", "first-boundary", "no"), _v("long-horizon", "best-simple", null_b),
        _v("dependency-resolution", "best-simple", "no"),
    ]


def test_positive_yes_on_both_bars_and_a_quiet_null_is_informative() -> None:
    out = controls_outcome(_study("yes", "yes", "no"))
    assert out.positive_yes and out.null_yes is False and out.informative and out.null_ok
    assert out.label() == ""
    vs = _study("yes", "yes", "no")
    assert [v.reason for v in mark_uninformative(vs, out)] == [v.reason for v in vs]
    assert "informative" in out.text() and "no bar-(b) yes" in out.text()


def test_positive_not_yes_on_one_bar_labels_every_verdict_uninformative() -> None:
    vs = _study("yes", "no", "no")
    out = controls_outcome(vs)
    assert out.positive_yes is False and not out.informative
    marked = mark_uninformative(vs, out)
    assert all(v.reason.startswith("uninformative (the positive control") for v in marked)
    assert all(v.reason == "" for v in vs)  # the originals are untouched
    assert "every verdict of this study is uninformative" in out.text()


def test_null_yes_on_bar_b_is_reported() -> None:
    out = controls_outcome(_study("yes", "yes", "yes"))
    assert out.informative and out.null_yes and out.null_ok is False
    assert "false positives" in out.text()


def test_a_study_without_controls_is_uninformative() -> None:
    out = controls_outcome([_v("dependency-resolution", "best-simple", "yes")])
    assert out.positive_yes is None and out.null_yes is None and not out.informative
    assert "ran no positive control" in out.label()


def test_unscoped_verdicts_need_one_policy_yes_on_both_bars_at_every_budget() -> None:
    vs = [_v("positive-control", b, "yes", budget=k) for b in ("first-boundary", "best-simple")
          for k in ("1ckpt", "2ckpt")]
    assert controls_outcome(vs).positive_yes
    vs[-1].status = "no"  # bar (b) at 2 checkpoints
    assert not controls_outcome(vs).positive_yes
    vs.append(_v("positive-control", "first-boundary", "refused", policy="ridge"))
    assert not controls_outcome(vs).positive_yes  # refused verdicts count for nothing


def test_only_confirmatory_verdicts_count_when_verdicts_carry_a_scope() -> None:
    vs = [_v("positive-control", "first-boundary", "yes", scope="confirmatory"),
          _v("positive-control", "best-simple", "yes", scope="confirmatory"),
          _v("positive-control", "best-simple", "no", policy="ridge", scope="exploratory")]
    assert controls_outcome(vs).positive_yes  # the exploratory no does not count
    vs[1].status = "no"
    assert not controls_outcome(vs).positive_yes
