"""The repair brain: the repair agent's decisions from the transcript alone, re-derived after a
resume, and a real repair when its commands are run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oracle.agents.model_server import BrainError, RepairBrain, Shell, Step
from oracle.agents.model_server.repair import RepairTask, task_prompt
from oracle.agents.repair.tasks import RUNNER, make_repair_tasks
from tests.oracle.agents.model_server.transcripts import conversation


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("repair-brain")
    (t,) = make_repair_tasks(1, 0, root, n_repos=1, families={"numeric": ("fractions",)})
    t.params.update(passing_sample=2, top_lines=3, max_edits=8, brain_seed=7)
    return t


def _prompt(t) -> str:
    return task_prompt(t.params, runner=str(RUNNER), python=sys.executable, seed=0)


def _run(step: Step, ws: Path) -> str:
    (action,) = step.calls
    assert isinstance(action, Shell) and action.timeout_s
    return subprocess.run(action.command, shell=True, cwd=ws, capture_output=True,
                          text=True).stdout


def test_the_prompt_header_round_trips(task) -> None:
    t = RepairTask.from_prompt(_prompt(task))
    assert t == RepairTask("fractions", str(RUNNER), sys.executable, 7, 2, 3, 8)
    assert RepairTask.from_prompt("no header here") is None
    with pytest.raises(BrainError, match="bad <ripplecp-repair> header"):
        RepairTask.from_prompt("<ripplecp-repair>{}</ripplecp-repair>")
    with pytest.raises(BrainError, match="no <ripplecp-repair> task header"):
        RepairBrain().next_step(conversation("repair something", []))


def test_the_brain_repairs_a_real_module_and_re_derives_after_a_resume(task, tmp_path: Path) -> None:
    brain, prompt = RepairBrain(), _prompt(task)
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    done: list[tuple[str, str | None]] = []
    labels = []
    while True:
        step = brain.next_step(conversation(prompt, done))
        labels.append(step.label)
        if step.finished:
            break
        done.append((step.calls[0].command, _run(step, ws)))
        assert len(done) < 200
    assert step.text.startswith("patched line ") and labels[-1] == f"repair/done/{len(done)}"
    assert subprocess.run(task.verifier, cwd=ws).returncode == 0
    phases = [lb.split("/")[1] for lb in labels]
    assert phases[0] == "reproduce" and phases[1] == "localise" and phases[-2] == "verify"
    assert json.loads(done[0][1])["failed"]  # the reproduction found failing tests
    # every prefix of the transcript, resumed (a new prompt after it), asks for the same next
    # step as the uninterrupted run did: the state is re-derived from the transcript alone
    for k in range(len(done) + 1):
        resumed = conversation(prompt, done[:k], "The previous session was cut off.")
        assert brain.next_step(resumed).calls == (brain.next_step(conversation(prompt, done[:k]))).calls
        want = done[k][0] if k < len(done) else None
        got = brain.next_step(resumed)
        assert (got.calls[0].command if got.calls else None) == want


def test_killed_and_foreign_calls_are_passed_over(task) -> None:
    brain, prompt = RepairBrain(), _prompt(task)
    first = brain.next_step(conversation(prompt, [])).calls[0].command
    # the killed call (no result) is issued again; a call the procedure never asked for is skipped
    again = brain.next_step(conversation(prompt, [("ls -la", "x"), (first, None)]))
    assert again.calls[0].command == first and again.label == "repair/reproduce/0"
    passing = json.dumps({"run": 3, "failed": [], "ids": ["a", "b", "c"]})
    done = brain.next_step(conversation(prompt, [(first, passing)]))
    assert done.finished and "nothing to repair" in done.text


def test_choices_follow_the_seed_in_the_header(task) -> None:
    out = json.dumps({"run": 30, "failed": ["f1"], "ids": [f"t{i}" for i in range(30)] + ["f1"]})
    covers = []
    for seed in (1, 2, 3, 4):
        params = dict(task.params, brain_seed=seed)
        prompt = task_prompt(params, runner=str(RUNNER), python=sys.executable, seed=0)
        first = RepairBrain().next_step(conversation(prompt, [])).calls[0].command
        done = [(first, out), ("x", "y")]
        step = RepairBrain().next_step(conversation(prompt, done[:1]))
        assert step.calls[0].command.endswith("cover . fractions f1")  # failing tests first
        done = [(first, out), (step.calls[0].command, json.dumps({"ok": False, "lines": [1]}))]
        covers.append(RepairBrain().next_step(conversation(prompt, done)).calls[0].command)
    assert len(set(covers)) > 1  # the passing-test sample is drawn from the seed


def test_the_runner_never_runs_stale_bytecode_of_an_edited_module(task, tmp_path: Path) -> None:
    """A same-size edit landing in the mtime second of a cached .pyc (a timing accident, more
    likely under load) must still be what the next suite runs: the tools read source only."""
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_template, ws)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def tool(*args: str) -> dict:
        p = subprocess.run([sys.executable, str(RUNNER), args[0], str(ws), "fractions", *args[1:]],
                           capture_output=True, text=True, env=env)  # the runtime's shell env
        return json.loads(p.stdout.strip().splitlines()[-1])

    src = ws / "fractions.py"
    failing = tool("suite")["failed"]
    assert failing  # the task's injected bug
    stamp = src.stat()
    cands = tool("candidates", *map(str, range(1, len(src.read_text().splitlines()) + 1)))
    c = next(c for c in cands["candidates"] if len(c["old"]) == len(c["new"]))
    assert tool("edit", str(c["line"]), str(c["col"]), c["old"], c["new"])["ok"]
    os.utime(src, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # same size, same mtime
    fresh = tmp_path / "fresh"
    shutil.copytree(ws, fresh, ignore=shutil.ignore_patterns("__pycache__"))
    want = subprocess.run([sys.executable, "-B", str(RUNNER), "suite", str(fresh), "fractions"],
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    assert tool("suite")["failed"] == json.loads(want)["failed"]
    assert not list(ws.rglob("fractions*.pyc"))  # and the tools leave no bytecode behind
