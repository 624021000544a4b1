"""The scripted brain: plans read from JSON with one-line errors, steps chosen by position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oracle.agents.model_server import (
    Call,
    Conversation,
    Edit,
    Message,
    Plan,
    PlanError,
    ScriptedBrain,
    Shell,
    Step,
    ToolCall,
    ToolResult,
    make_brain,
)


def _conv(*roles_texts: tuple[str, str]) -> Conversation:
    msgs = []
    for i, (role, text) in enumerate(roles_texts):
        if role == "assistant":
            msgs.append(Message("assistant", "", (ToolCall(f"c{i}", "bash", kind="shell",
                                                           command="x"),)))
        elif role == "tool":
            msgs.append(Message("tool", "", results=(ToolResult(f"c{i - 1}", "ok", 0),)))
        else:
            msgs.append(Message(role, text))  # type: ignore[arg-type]
    return Conversation("test", tuple(msgs))


PLAN = {"turns": [
    {"steps": [{"shell": "a"}, {"edit": {"path": "f", "old": "x", "new": "y"}, "text": "e"},
               {"calls": [{"shell": "b", "timeout_s": 3},
                          {"call": {"name": "Read", "arguments": {"file_path": "/f"}}}]},
               {"finish": "done"}]},
    {"match": "RESUME", "steps": [{"shell": "r"}, {"finish": "resumed"}]},
    {"match": "FORK", "steps": [{"finish": "forked"}]},
]}


def test_plan_reads_every_step_form() -> None:
    plan = Plan.from_json(PLAN)
    steps = plan.turns[0].steps
    assert steps[0] == Step((Shell("a"),), "", "turn0/step0")
    assert steps[1] == Step((Edit("f", "x", "y"),), "e", "turn0/step1")
    assert steps[2].calls == (Shell("b", 3.0), Call("Read", {"file_path": "/f"}))
    assert steps[3].finished and steps[3].text == "done"
    assert [t.match for t in plan.turns] == [None, "RESUME", "FORK"]
    assert Plan.from_json([{"finish": "x"}]) == Plan.from_json({"steps": [{"finish": "x"}]})


def test_step_k_answers_the_request_holding_k_assistant_turns() -> None:
    brain = ScriptedBrain(Plan.from_json(PLAN))
    c0 = _conv(("system", "s"), ("user", "task"))
    assert brain.next_step(c0).label == "turn0/step0"
    c2 = _conv(("user", "task"), ("assistant", ""), ("tool", ""), ("assistant", ""),
               ("tool", ""))
    assert brain.next_step(c2).label == "turn0/step2"
    c9 = _conv(("user", "task"), *[("assistant", ""), ("tool", "")] * 9)
    end = brain.next_step(c9)
    assert end.finished and end.text == "plan finished" and end.label == "turn0/end"


def test_later_turns_start_at_their_prompt() -> None:
    brain = ScriptedBrain(Plan.from_json(PLAN))
    resumed = _conv(("user", "task"), ("assistant", ""), ("tool", ""),
                    ("user", "RESUME: go on"))
    assert brain.position(resumed) == (1, 0)
    after = _conv(*resumed_roles(), ("assistant", ""), ("tool", ""))
    assert brain.next_step(after).label == "turn1/step1"
    forked = _conv(*resumed_roles(), ("assistant", ""), ("tool", ""), ("user", "FORK it"))
    assert brain.position(forked) == (2, 0)  # the last turn that matches wins


def resumed_roles() -> list[tuple[str, str]]:
    return [("user", "task"), ("assistant", ""), ("tool", ""), ("user", "RESUME: go on")]


@pytest.mark.parametrize("obj, msg", [
    (3, "a plan is a list of steps"),
    ({"turns": []}, "non-empty list 'turns'"),
    ({"steps": [{"shel": "x"}]}, r"P.json.steps\[0\]: unknown step \['shel'\]"),
    ({"steps": [{"shell": ""}]}, r"steps\[0\].shell: expected a command"),
    ({"steps": [{"shell": "x", "timeout_s": -1}]}, "timeout_s: expected a positive number"),
    ({"steps": [{"edit": {"path": "f"}}]}, "edit: expected strings 'path', 'old' and 'new'"),
    ({"steps": [{"calls": []}]}, "calls: expected a non-empty list"),
    ({"steps": [{"finish": 3}]}, "finish: expected the final message text"),
    ({"turns": [{"steps": []}, {"steps": []}]}, r"turns\[1\].match: a later turn needs"),
    ({"turns": [{"match": "x", "steps": []}]}, r"turns\[0\].match: the first turn"),
])
def test_bad_plans_name_the_file_and_step(tmp_path: Path, obj: object, msg: str) -> None:
    p = tmp_path / "P.json"
    p.write_text(json.dumps(obj))
    with pytest.raises(PlanError, match=msg) as err:
        Plan.load(p)
    assert "\n" not in str(err.value) and str(p) in str(err.value)


def test_plan_file_that_is_not_json_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "P.json"
    p.write_text('[\n{"shell": "a"},\n{oops}\n]')
    with pytest.raises(PlanError, match=r"P.json:3: not JSON"):
        Plan.load(p)


def test_make_brain(tmp_path: Path) -> None:
    p = tmp_path / "P.json"
    p.write_text(json.dumps(PLAN))
    assert isinstance(make_brain("scripted", plan=p), ScriptedBrain)
    with pytest.raises(ValueError, match="needs a plan"):
        make_brain("scripted")
    with pytest.raises(ValueError, match="needs the endpoint's --url"):
        make_brain("proxy")
    with pytest.raises(ValueError, match="unknown brain 'nope'"):
        make_brain("nope")
