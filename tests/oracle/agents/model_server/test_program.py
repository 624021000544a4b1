"""The program brains (depres, cbuild, migrate): each step of the family's program as one shell
command, the facts carried from one step's output to the next command, re-derived from the
transcript after a resume; Codex's long commands polled until they exit."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from oracle.agents.model_server import BRAINS, BrainError, Call, ProgramBrain, Shell, make_brain
from oracle.agents.model_server.program import (
    PROGRAM_FAMILIES,
    ProgramTask,
    running_session,
    shell_outputs,
    task_prompt,
)
from oracle.agents.program import STEP_END
from oracle.protocol import TaskSpec
from tests.oracle.agents.model_server.transcripts import Done, conversation

#: per family: a task's params, the steps of its program, and the facts each step finds
CASES = {
    "depres": ({"index": "/idx/geo", "cache": "/c/geo"}, 4,
               [{"pins": ["a==1.0"], "tried_relaxations": [["a", 2]]}, {}, {"runtime_pin": "b==2.0"}, {}]),
    "cbuild": ({"stages": ["bits", "huff", "frame"]}, 4,
               [{}, {"config:huff": {"SHIFT": 5}}, {}, {}]),
    "migrate": ({"modules": 2, "golden_rows": 9000}, 3,
                [{"map:f1": ["derive_total", [1, 0], 1]}, {"map:f2": ["project", [0], 1000]}, {}]),
    "bisect": ({"releases": 2}, 4, [{}, {"culprit:v1": "0" * 40}, {}, {}]),
}
RESUME = "The previous session was cut off by a machine failure. Continue the task."


def _task(family: str) -> TaskSpec:
    params = {**CASES[family][0], "prompt": "p", "brain_seed": 11}
    return TaskSpec(f"{family}-x-00", f"{family}/x", family, None, None, params)


def _prompt(family: str) -> str:
    return task_prompt(_task(family), seed=11, python=sys.executable)


def _output(step: int, facts: dict, last: bool) -> str:
    """What the program's step mode prints: plain lines, fact lines, the STEP_END line."""
    lines = [f"[work] command: make -s s{step} -> exit 0"]
    lines += [json.dumps({"type": "fact", "key": k, "value": v}) for k, v in facts.items()]
    lines.append(json.dumps({"type": STEP_END, "step": step, "name": "s", "last": last,
                             "facts": facts}))
    return "\n".join(lines) + "\n"


def _facts_of(command: str) -> dict:
    argv = shlex.split(command)
    return json.loads(argv[argv.index("--facts") + 1]) if "--facts" in argv else {}


def _step_of(command: str) -> int:
    argv = shlex.split(command)
    return int(argv[argv.index("--step") + 1])


def test_every_program_family_has_a_registered_brain() -> None:
    assert set(PROGRAM_FAMILIES) == {"depres", "cbuild", "migrate", "bisect"}
    for f in PROGRAM_FAMILIES:
        assert BRAINS[f] is ProgramBrain and make_brain(f).name == f
    with pytest.raises(ValueError, match="unknown brain 'migrat'; choose from .*migrate"):
        make_brain("migrat")
    with pytest.raises(ValueError, match="no program brain for 'repair'"):
        ProgramBrain("repair")


def test_the_prompt_header_round_trips_and_names_the_program() -> None:
    t = ProgramTask.from_prompt(_prompt("cbuild"))
    assert t is not None and t.family == "cbuild" and t.seed == 11 and t.python == sys.executable
    assert t.script == "oracle/agents/cbuild/agent.py"
    assert t.task == {"task_id": "cbuild-x-00", "repo": "cbuild/x",
                      "params": {"stages": ["bits", "huff", "frame"]}}  # not the runtime's own
    argv = shlex.split(t.command(2, {"config:huff": {"SHIFT": 5}}))
    assert argv[:2] == ["env", f"PYTHONPATH={t.root}"] and argv[3].endswith(t.script)
    assert argv[argv.index("--workspace") + 1] == "." and argv[-5:-2] == ["step", "--step", "2"]
    assert json.loads(argv[argv.index("--task-json") + 1]) == t.task
    assert ProgramTask.from_prompt("no header") is None
    with pytest.raises(BrainError, match="bad <ripplecp-program> header"):
        ProgramTask.from_prompt("<ripplecp-program>{}</ripplecp-program>")
    with pytest.raises(BrainError, match="no <ripplecp-program> task header"):
        ProgramBrain("depres").next_step(conversation("do something", []))
    with pytest.raises(BrainError, match="the task header is a cbuild task"):
        ProgramBrain("depres").next_step(conversation(_prompt("cbuild"), []))
    with pytest.raises(ValueError, match="no step program for family 'repair'"):
        task_prompt(TaskSpec("r", "r", "repair", None, None, {}), seed=0, python="python")


@pytest.mark.parametrize("family", list(CASES))
def test_each_step_carries_the_facts_so_far_and_a_resume_re_derives_them(family: str) -> None:
    brain, prompt = ProgramBrain(family), _prompt(family)
    _, n_steps, found = CASES[family]
    done: Done = []
    facts: dict = {}
    labels = []
    while True:
        step = brain.next_step(conversation(prompt, done))
        labels.append(step.label)
        if step.finished:
            break
        (action,) = step.calls
        assert isinstance(action, Shell) and action.timeout_s and action.timeout_s >= 600
        k = len(done) + 1
        assert _step_of(action.command) == k and _facts_of(action.command) == facts
        facts = {**facts, **found[k - 1]}
        done.append((action.command, _output(k, facts, k == n_steps)))
    assert labels == [f"{family}/step/{k}" for k in range(1, n_steps + 1)] + [f"{family}/done/{n_steps}"]
    assert step.text == f"done: {n_steps} steps"
    # every prefix, resumed (a new prompt after it), asks for what the uninterrupted run did
    for k in range(len(done) + 1):
        resumed = brain.next_step(conversation(prompt, done[:k], RESUME))
        want = done[k][0] if k < len(done) else None
        assert (resumed.calls[0].command if resumed.calls else None) == want


@pytest.mark.parametrize("family", list(CASES))
def test_killed_foreign_and_failed_steps(family: str) -> None:
    brain, prompt = ProgramBrain(family), _prompt(family)
    first = brain.next_step(conversation(prompt, [])).calls[0].command
    # a killed call (no result) is issued again; a call the brain never asked for is passed over
    again = brain.next_step(conversation(prompt, [("ls -la", "x"), (first, None)]))
    assert again.calls[0].command == first and again.label == f"{family}/step/1"
    # an output of another step (a STEP_END of step 2) does not finish step 1
    assert brain.next_step(conversation(prompt, [(first, _output(2, {}, False))])).finished
    # a step that printed no STEP_END line failed: the brain stops, saying so
    failed = brain.next_step(conversation(prompt, [(first, "Traceback ...\nSystemExit: no fix\n")]))
    assert failed.finished and failed.label == f"{family}/failed/1"
    assert failed.text.startswith("step 1 failed:") and "no fix" in failed.text


RUNNING = "Chunk ID: 6e9942\nWall time: 30.0021 seconds\nProcess running with session ID 72694\n" \
          "Original token count: 0\nOutput:\n[resolve] command: pip install --dry-run -> exit 1\n"


def test_a_long_codex_step_is_polled_until_it_exits_and_its_outputs_joined() -> None:
    brain, prompt = ProgramBrain("depres"), _prompt("depres")
    first = brain.next_step(conversation(prompt, [])).calls[0].command
    assert running_session(RUNNING) == "72694" and running_session("plain output") is None
    poll = brain.next_step(conversation(prompt, [(first, RUNNING)]))
    (call,) = poll.calls
    assert isinstance(call, Call) and call.name == "write_stdin" and poll.label == "depres/poll"
    assert call.arguments["session_id"] == 72694 and call.arguments["chars"] == ""
    # still running after the first poll: poll again; then it exits with the step's output
    still = RUNNING.replace("Chunk ID: 6e9942", "Chunk ID: 77aa01")
    again = brain.next_step(conversation(prompt, [(first, RUNNING)], polls=((72694, still, None),)))
    assert again.calls[0].name == "write_stdin"
    end = _output(1, {"pins": ["a==1.0"]}, False)
    conv = conversation(prompt, [(first, RUNNING)], polls=((72694, still, None), (72694, end, 0)))
    (finished,), running = shell_outputs(conv)
    assert running == {} and finished == (first, RUNNING + still + end)
    nxt = brain.next_step(conv)
    assert _step_of(nxt.calls[0].command) == 2 and _facts_of(nxt.calls[0].command) == {"pins": ["a==1.0"]}
    # a poll whose session is gone (neither running nor exited): the step is issued again
    gone = conversation(prompt, [(first, RUNNING)], RESUME,
                         polls=((72694, "write_stdin failed: Unknown process id 72694", None),))
    assert brain.next_step(gone).calls[0].command == first
