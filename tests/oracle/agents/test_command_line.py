"""The generic command-line agent adapter: argv templates, live lines, clocks, non-JSON output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from features.schema import Event
from oracle.agents.command_line import CommandLineAgent, substitute
from oracle.protocol import AgentReport, VirtualClock, WallClock


def test_substitute_is_per_argument_and_never_reexpands() -> None:
    vals = {"workspace": "/w s", "prompt": "x; rm -rf / {workspace} $(id)"}
    out = substitute(["--cd", "{workspace}", "{prompt}", "{unknown}", "a{workspace}b"], vals)
    assert out == ["--cd", "/w s", "x; rm -rf / {workspace} $(id)", "{unknown}", "a/w sb"]


def test_task_text_reaches_program_as_one_argument(tmp_path: Path, task_spec) -> None:
    """No shell: hostile prompt text arrives verbatim as a single argv element."""
    ws = tmp_path / "ws"
    ws.mkdir()
    prog = ("import json,sys; print(json.dumps({'type':'argv','argv':sys.argv[1:]}))")
    seen: list[dict] = []

    def parse(obj: dict, t: float) -> list[AgentReport]:
        seen.append(obj)
        return []

    agent = CommandLineAgent([sys.executable, "-c", prog, "{prompt}", "{seed}"],
                             [sys.executable, "-c", prog], parse)
    prompt = "fix it'; touch PWNED; echo \"$HOME\" `id`"
    run = agent.start(task_spec(prompt=prompt), ws, 42, WallClock())
    list(run.reports())
    assert run.wait() == 0
    assert seen[0]["argv"] == [prompt, "42"]
    assert not (ws / "PWNED").exists()


def test_adapter_uses_the_given_clock(tmp_path: Path, task_spec) -> None:
    clock = VirtualClock(100.0)
    prog = "import json; print(json.dumps({'type':'x'}))"

    def parse(obj: dict, t: float) -> list[AgentReport]:
        from features.schema import Event

        return [AgentReport("event", event=Event(index=7, kind="other"))]

    agent = CommandLineAgent([sys.executable, "-c", prog], [sys.executable, "-c", prog], parse)
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(task_spec(), ws, 0, clock)
    (rep,) = list(run.reports())
    run.wait()
    assert rep.event is not None and rep.event.end == 100.0 and rep.event.index == 0
    assert rep.event.extra["arrival"] == 100.0 and clock.now() == 100.0


def test_non_json_stdout_lines_are_counted_and_warned_never_silently_dropped(tmp_path: Path, task_spec) -> None:
    prog = ("import json; print('Loading model...'); print(json.dumps({'type':'x'})); "
            "print('[1, 2]'); print('{broken')")

    def parse(obj: dict, t: float) -> list[AgentReport]:
        return [AgentReport("event", event=Event(index=0, kind="other"))]

    agent = CommandLineAgent([sys.executable, "-c", prog], [sys.executable, "-c", prog], parse)
    ws = tmp_path / "ws"
    ws.mkdir()
    run = agent.start(task_spec(), ws, 0, WallClock())
    with pytest.warns(UserWarning, match=r"stdout line 1 is not a JSON object.*Loading model") as rec:
        reps = list(run.reports())
    assert run.wait() == 0 and len(reps) == 1
    assert len([w for w in rec if "not a JSON object" in str(w.message)]) == 1  # first one only
    assert run.usage["non_json_lines"] == 3 and run.usage["lines"] == 4
