"""The LLM-free repair agent on a real stdlib module: real mutant, real repair, real re-derivation."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from oracle.agents.repair import RepairAgent
from oracle.agents.repair.mutants import Mutation, candidate_mutations, run_suite, stdlib_source
from oracle.agents.repair.tasks import make_repair_tasks
from oracle.protocol import RestorePoint, WallClock


def test_mutation_is_a_one_token_edit_with_an_inverse():
    src = stdlib_source("textwrap").read_text()
    muts = candidate_mutations(src)
    assert len(muts) > 50
    m = muts[len(muts) // 2]
    mutated = m.apply(src)
    diff = [(a, b) for a, b in zip(src.splitlines(), mutated.splitlines(), strict=True) if a != b]
    assert len(diff) == 1 and m.new in diff[0][1]
    assert m.inverse().apply(mutated) == src
    with pytest.raises(ValueError, match="does not hold"):
        Mutation(m.line, m.col, "@@", "x").apply(src)


def test_candidate_mutations_skip_strings_and_comments():
    src = 'x = "a < b"  # 1 + 2\ny = 3 < 4\n'
    muts = candidate_mutations(src)
    assert {m.line for m in muts} == {2}


def _run(agent, run):
    events, boundaries = [], []
    for rep in run.reports():
        if rep.kind == "event":
            events.append(rep.event)
        elif rep.kind == "boundary":
            boundaries.append(rep.boundary)
    assert run.wait() == 0
    return events, boundaries


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("repair")
    (t,) = make_repair_tasks(1, seed=0, root=root)
    return t, root


def test_mutant_is_detected_by_the_modules_own_tests(task):
    t, root = task
    mod = t.params["module"]
    _, failed, code = run_suite(mod, t.workspace_template)
    assert code == 1 and failed, "the injected bug must be detected by test.test_" + mod
    pristine = root / "pristine"
    pristine.mkdir()
    shutil.copy(stdlib_source(mod), pristine / f"{mod}.py")
    assert run_suite(mod, pristine)[2] == 0


def test_repair_end_to_end_and_resume_skips_localisation(task, tmp_path):
    t, _ = task
    agent = RepairAgent()
    ws = tmp_path / "ws"
    shutil.copytree(t.workspace_template, ws)
    assert not agent.verify(t, ws)
    run = agent.start(t, ws, seed=3, clock=WallClock())
    events, boundaries = _run(agent, run)
    assert agent.verify(t, ws), "the agent must repair the detected mutant"
    assert boundaries == list(range(1, len(boundaries) + 1)) and len(boundaries) >= 3
    timed = [e for e in events if e.kind in ("command", "test", "file_change")]
    assert timed and all(e.end is not None and e.duration is not None for e in timed)
    assert all(e.argv[0] == sys.executable for e in events if e.kind == "test")
    phases = [e.extra.get("phase") for e in events]
    assert "localise" in phases and phases.index("localise") < phases.index("try")

    # resume from the state after localisation: the preserved fact makes it skip localising
    transcript = [{"type": "step_done", "step": 1}, {"type": "step_done", "step": 2}]
    name = f"{t.params['module']}.py"
    ws2 = tmp_path / "ws2"
    shutil.copytree(t.workspace_template, ws2)
    facts = json.loads(json.dumps(run.preserved()[1]))
    facts = {k: facts[k] for k in ("failing_tests", "suspicious_lines")}
    run2 = agent.resume(t, RestorePoint(2, ws2, transcript, facts), ws2, seed=3, clock=WallClock())
    events2, boundaries2 = _run(agent, run2)
    phases2 = [e.extra.get("phase") for e in events2]
    assert "localise" not in phases2 and phases2[0] == "orient"
    assert boundaries2 and boundaries2[0] == 3
    assert agent.verify(t, ws2)
    assert (ws2 / name).read_text() != (t.workspace_template / name).read_text()


@pytest.mark.slow
def test_two_bugs_in_sequence_two_rounds_of_localise_and_patch(tmp_path, finish):
    (t,) = make_repair_tasks(1, seed=0, root=tmp_path / "tasks", n_repos=1,
                             families={"stdlib/utilities": ("fnmatch",)}, two_bug_every=1,
                             params={"passing_sample": 8, "max_edits": 40})
    assert t.task_id == "fnmatch-m0x2" and t.params["bugs"] == 2
    bugs = [Mutation(**m) for m in json.loads((tmp_path / "tasks" / t.task_id / "mutation.json").read_text())]
    assert len(bugs) == 2 and bugs[0].line != bugs[1].line
    src = stdlib_source("fnmatch").read_text()
    assert (t.workspace_template / "fnmatch.py").read_text() == bugs[1].apply(bugs[0].apply(src))
    agent = RepairAgent()
    ws = tmp_path / "ws"
    shutil.copytree(t.workspace_template, ws)
    done = finish(agent.start(t, ws, 1, WallClock()), tmp_path / "snaps", ws)
    assert done.rc == 0 and agent.verify(t, ws)
    assert done.boundaries == [1, 2, 3, 4, 5] and done.phases.count("localised") == 2
    _, _, facts = done.snapshots[3]  # after the first patch: the remaining failures are known
    assert facts["patch"] and facts["failing_tests:2"] and "pending" in facts
    assert len(facts["failing_tests:2"]) < len(facts["failing_tests"])
    snap, transcript, facts = done.snapshots[3]
    ws2 = tmp_path / "resume"
    shutil.copytree(snap, ws2)
    again = finish(agent.resume(t, RestorePoint(3, ws2, transcript, facts), ws2, 1, WallClock()))
    assert again.rc == 0 and agent.verify(t, ws2) and again.boundaries == [4, 5]
    assert "undo_pending" not in again.phases  # the restore point holds the first patch


def test_runner_lists_and_applies_token_edits_without_importing_the_module(tmp_path):
    """The repair brain's tools: the single-token edits on some lines, and one edit applied."""
    import subprocess

    from oracle.agents.repair.runner import __file__ as runner

    src = stdlib_source("textwrap").read_text()
    (tmp_path / "textwrap.py").write_text(src)
    lines = sorted({m.line for m in candidate_mutations(src)})[:2]

    def tool(*args):
        p = subprocess.run([sys.executable, runner, args[0], ".", "textwrap", *args[1:]],
                           cwd=tmp_path, capture_output=True, text=True)
        return p.returncode, json.loads(p.stdout)

    code, out = tool("candidates", *map(str, lines))
    assert code == 0
    assert out["candidates"] == [m.to_dict() for m in candidate_mutations(src, set(lines))]
    m = Mutation(**out["candidates"][0])
    code, out = tool("edit", str(m.line), str(m.col), m.old, m.new)
    assert code == 0 and out["ok"] and out["text"] == m.apply(src).splitlines()[m.line - 1]
    assert (tmp_path / "textwrap.py").read_text() == m.apply(src)
    code, out = tool("edit", str(m.line), str(m.col), m.old, m.new)  # the token is not there now
    assert code == 1 and not out["ok"] and "does not hold" in out["error"]
    assert (tmp_path / "textwrap.py").read_text() == m.apply(src)


def test_a_python_without_its_own_tests_is_named_not_read_as_no_mutants(tmp_path: Path) -> None:
    """A python whose stdlib tests are not installed (Debian's /usr/bin/python3 without
    libpython3.11-testsuite) made every suite run 'crash', so task-making failed with
    'textwrap: only 0 detected mutants found, need 1', which hid the cause. ``this`` is a
    real pure-Python stdlib module that has no test module on any python."""
    from oracle.agents.repair.mutants import detected_mutants

    with pytest.raises(ValueError) as err:
        detected_mutants("this", tmp_path / "scratch", 1, seed=0)
    msg = str(err.value)
    assert msg.startswith("this: ") and "test.test_this is not installed" in msg and "\n" not in msg
    assert sys.executable in msg
