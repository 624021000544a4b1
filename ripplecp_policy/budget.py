"""The checkpoint budget: its kinds, a :class:`Budget` and a :class:`BudgetSpec` as a command
line gives it. The standard library only, so a command checks ``--budget`` before importing
anything heavy (the advisor's wrapper starts the agent at once)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from labelsets.tables import LabelSet

__all__ = ["BUDGET_KINDS", "Budget", "BudgetKind", "BudgetSpec", "check_budget_specs"]

BudgetKind = Literal["count", "seconds", "bytes"]


@dataclass(frozen=True)
class Budget:
    """A per-task checkpoint budget: by count, by creation seconds, or by checkpoint bytes."""

    kind: BudgetKind
    amount: float

    def __post_init__(self) -> None:
        if self.kind not in ("count", "seconds", "bytes"):
            raise ValueError(f"budget kind must be count, seconds or bytes, got {self.kind!r}")
        if not (self.amount >= 0 and math.isfinite(self.amount)):
            raise ValueError(f"budget amount must be finite and >= 0, got {self.amount}")

    def charge(self, creation_s: float, size_bytes: float) -> float:
        """What one checkpoint costs in this budget's unit."""
        if self.kind == "count":
            return 1.0
        if self.kind == "seconds":
            return float(creation_s)
        return float(size_bytes)

    def label(self) -> str:
        unit = {"count": "ckpt", "seconds": "s", "bytes": "B"}[self.kind]
        return f"{self.amount:g}{unit}"


#: the budget kinds, in the order they are listed
BUDGET_KINDS: tuple[str, ...] = get_args(BudgetKind)


@dataclass(frozen=True)
class BudgetSpec:
    """A budget as a study asks for it (``--budgets``): ``count:N`` (N a positive integer; a
    bare ``N`` is a count too), ``seconds:S`` or ``bytes:B`` (> 0), or ``seconds:Kx`` /
    ``bytes:Kx`` — K > 0 times a label set's mean checkpoint creation seconds / bytes, so
    the same spec fits every family. :meth:`parse` checks the text before any work;
    :meth:`resolve` turns it into the :class:`Budget` of one label set."""

    kind: BudgetKind
    amount: float
    relative: bool = False

    def __post_init__(self) -> None:
        if self.kind not in BUDGET_KINDS:
            raise ValueError(f"budget kind must be count, seconds or bytes, got {self.kind!r}")
        finite = math.isfinite(self.amount)
        if self.kind == "count":
            if self.relative or not (finite and self.amount >= 1 and self.amount == int(self.amount)):
                raise ValueError(f"a count budget takes a positive integer, got "
                                 f"{self.amount:g}{'x' if self.relative else ''}")
        elif not (finite and self.amount > 0):
            what = "K in Kx" if self.relative else "the amount"
            raise ValueError(f"{what} must be a finite number > 0, got {self.amount:g}")

    @classmethod
    def parse(cls, text: str) -> BudgetSpec:
        """``count:2`` | ``3`` | ``seconds:9.5`` | ``seconds:2x`` | ``bytes:1e6`` |
        ``bytes:1.5x``; ValueError naming the spec and what it accepts."""
        kind, _, amount = text.partition(":") if ":" in text else ("count", "", text)
        relative = amount.endswith("x")
        number = amount[:-1] if relative else amount
        try:
            if kind not in BUDGET_KINDS:
                raise ValueError(f"the kind must be count, seconds or bytes, got {kind!r}")
            try:
                value = float(number)
            except ValueError:
                raise ValueError(f"the amount must be a number (or Kx for seconds/bytes), "
                                 f"got {amount!r}") from None
            return cls(kind, value, relative)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc} (count:N, seconds:S, seconds:Kx, bytes:B or "
                             "bytes:Kx)") from None

    def resolve(self, data: LabelSet) -> Budget:
        """The budget for ``data``: a relative amount scales its mean checkpoint cost;
        seconds and bytes are rounded to 3 decimals."""
        value = self.amount
        if self.relative:
            col = "creation_s" if self.kind == "seconds" else "size_bytes"
            value = self.amount * float(data.checkpoints[col].astype(float).mean())
        return Budget(self.kind, round(value, 3) if self.kind != "count" else value)


def check_budget_specs(specs: tuple[str, ...] | list[str]) -> None:
    """``check=`` of a command's ``--budgets``: every spec parses (:meth:`BudgetSpec.parse`),
    before any work."""
    for spec in specs:
        BudgetSpec.parse(spec)
