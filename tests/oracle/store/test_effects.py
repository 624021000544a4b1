"""Effect log: sequence numbers, drain/barrier, attribution, persistence, damage handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracle.store.effects import EffectLog, EffectLogCorruptError, ForkBarrierError


def test_append_numbers_and_records_branch(tmp_path: Path) -> None:
    log = EffectLog(tmp_path / "fx.jsonl", "b1")
    assert log.appended_upto == -1 and log.drained_upto == -1
    assert [log.append({"op": "send", "n": i}) for i in range(3)] == [0, 1, 2]
    assert log.appended_upto == 2
    lines = [json.loads(x) for x in (tmp_path / "fx.jsonl").read_text().splitlines()]
    assert [x["seq"] for x in lines] == [0, 1, 2]
    assert {x["branch_id"] for x in lines} == {"b1"}
    assert [x["effect"]["n"] for x in lines] == [0, 1, 2]


def test_barrier_blocks_until_drained(tmp_path: Path) -> None:
    log = EffectLog(tmp_path / "fx.jsonl", "b1")
    log.barrier()  # empty log: nothing pending
    for i in range(3):
        log.append({"i": i})
    with pytest.raises(ForkBarrierError, match="3 effect"):
        log.barrier()
    log.mark_drained(1)
    log.barrier(1)  # a fork point covering only seq <= 1 is durable now
    with pytest.raises(ForkBarrierError, match="seq 2..2"):
        log.barrier()
    with pytest.raises(ValueError):
        log.barrier(7)  # cannot cover effects that were never appended
    with pytest.raises(ValueError):
        log.mark_drained(3)
    log.mark_drained(0)  # going backwards is a no-op
    assert log.drained_upto == 1


def test_drain_applies_in_order_and_stops_on_sink_error(tmp_path: Path) -> None:
    log = EffectLog(tmp_path / "fx.jsonl", "b1")
    for i in range(4):
        log.append({"i": i})
    applied: list[int] = []

    def sink(rec: dict) -> None:
        if rec["effect"]["i"] == 2:
            raise OSError("remote refused")
        applied.append(rec["seq"])

    with pytest.raises(OSError):
        log.drain(sink)
    assert applied == [0, 1] and log.drained_upto == 1
    assert [r["seq"] for r in log.pending()] == [2, 3]
    assert log.drain(lambda rec: applied.append(rec["seq"])) == 3
    assert applied == [0, 1, 2, 3]
    log.barrier()


def test_state_survives_reopen(tmp_path: Path) -> None:
    p = tmp_path / "fx.jsonl"
    log = EffectLog(p, "b1")
    for i in range(5):
        log.append({"i": i})
    log.mark_drained(2)
    log.close()
    again = EffectLog(p, "b1")
    assert again.appended_upto == 4 and again.drained_upto == 2
    assert again.append({"i": 5}) == 5


def test_effects_attributable_across_branches_sharing_a_log(tmp_path: Path) -> None:
    p = tmp_path / "fx.jsonl"
    a, b = EffectLog(p, "cp-branch"), EffectLog(p, "skip-branch")
    assert a.append({"x": 1}) == 0
    assert b.append({"x": 2}) == 1  # b sees a's append: sequence numbers stay unique
    assert a.append({"x": 3}) == 2
    a.mark_drained(0)
    got = b.effects_of("cp-branch")
    assert [(r["seq"], r["effect"]["x"], r["drained"]) for r in got] == [(0, 1, True), (2, 3, False)]
    assert [r["seq"] for r in a.effects_of("skip-branch")] == [1]
    assert a.effects_of("nobody") == []


def test_torn_last_line_dropped_with_warning(tmp_path: Path) -> None:
    p = tmp_path / "fx.jsonl"
    log = EffectLog(p, "b1")
    log.append({"i": 0})
    log.close()
    with p.open("ab") as f:
        f.write(b'{"type": "effect", "seq": 1, "bra')  # killed mid-write
    with pytest.warns(UserWarning, match="torn last line"):
        again = EffectLog(p, "b1")
    assert again.appended_upto == 0
    assert again.append({"i": 1}) == 1
    assert len(p.read_text().splitlines()) == 2


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "fx.jsonl"
    log = EffectLog(p, "b1")
    for i in range(3):
        log.append({"i": i})
    log.close()
    lines = p.read_text().splitlines()
    lines[1] = lines[1].replace('"i":1', '"i":9')  # checksum no longer matches
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(EffectLogCorruptError, match=r"fx.jsonl:2"):
        EffectLog(p, "b1")


def test_rejects_bad_effects(tmp_path: Path) -> None:
    log = EffectLog(tmp_path / "fx.jsonl", "b1")
    with pytest.raises(TypeError):
        log.append(["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        log.append({"x": object()})
    with pytest.raises(ValueError):
        EffectLog(tmp_path / "fx2.jsonl", "")
    assert log.appended_upto == -1


_APPENDER = """
import sys
from pathlib import Path
from oracle.store.effects import EffectLog
log = EffectLog(Path(sys.argv[1]), sys.argv[2])
for i in range(int(sys.argv[3])):
    log.append({"i": i})
"""


def test_two_processes_appending_to_one_log(tmp_path: Path) -> None:
    import subprocess
    import sys

    p = tmp_path / "fx.jsonl"
    script = tmp_path / "appender.py"
    script.write_text(_APPENDER)
    procs = [subprocess.Popen([sys.executable, str(script), str(p), name, "150"])
             for name in ("left", "right")]
    assert [proc.wait(timeout=600) for proc in procs] == [0, 0]  # hang guard only
    log = EffectLog(p, "reader")
    assert log.appended_upto == 299  # 300 unique, gap-free sequence numbers
    for name in ("left", "right"):
        mine = log.effects_of(name)
        assert [r["effect"]["i"] for r in mine] == list(range(150))  # each in its own order
