"""The LLM-free agents as brains behind a real runtime: registered for ``--brain``, their tasks
and prompts, Codex's long commands counted once, the runtime recorded for the label set (the
study end to end: tests/experiments/test_collect_labels_runtime.py)."""

from __future__ import annotations

import json
import threading
import typing
from pathlib import Path

import pytest

from oracle.__main__ import PlanArgs
from oracle.agents import get_agent
from oracle.agents.llmfree import LLMFreeAgent
from oracle.agents.model_server import (
    BRAINS,
    Conversation,
    Message,
    ModelRequest,
    ScriptedBrain,
    ToolCall,
)
from oracle.agents.model_server.conversation import ToolResult
from oracle.agents.model_server.program import ProgramTask
from oracle.agents.model_server.scripted import Plan
from oracle.agents.runtime import CODEX_RULES, RUNTIME_BRAINS, Gate, RuntimeAgent
from oracle.agents.runtimes import get_runtime

RUNNING = "Chunk ID: 1\nWall time: 30.0 seconds\nProcess running with session ID 7\nOutput:\n"


def test_every_registered_brain_drives_a_runtime_and_the_command_line_offers_it() -> None:
    assert set(RUNTIME_BRAINS) == set(BRAINS) >= {"repair", "depres", "cbuild", "migrate"}
    brain = typing.get_type_hints(PlanArgs)["brain"]
    offered = {a for arg in typing.get_args(brain) for a in typing.get_args(arg)}
    assert offered == set(BRAINS)
    with pytest.raises(ValueError, match="unknown brain 'cbuld'; choose from .*cbuild"):
        RuntimeAgent("codex", brain="cbuld")


def test_a_program_brain_makes_its_family_tasks_with_the_header_it_reads(tmp_path: Path) -> None:
    agent = RuntimeAgent("codex", brain="cbuild")
    (task,) = agent.make_tasks(1, 0, tmp_path / "tasks", repos=1)
    assert task.family == "cbuild" and task.params["resume_prompt"]
    header = ProgramTask.from_prompt(task.params["prompt"])
    assert header is not None and header.family == "cbuild"
    assert header.seed == task.params["brain_seed"]  # one seed per task: a deterministic model
    assert header.task["params"] == {"stages": task.params["stages"]}
    run_seeded = RuntimeAgent("codex", brain="cbuild", seeds="run")
    assert ProgramTask.from_prompt(run_seeded._prompt(task, 5, "prompt")).seed == 5


def test_codex_counts_a_long_command_once_in_its_rollout_and_at_the_gate() -> None:
    """A command that outlived Codex's wait returns ``Process running ...`` and is finished by
    the poll that sees it exit: one tool, as the stream's one item.completed says."""
    def line(output: str) -> str:
        return json.dumps({"type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "c", "output": output}},
            separators=(",", ":"))
    rollout = "\n".join([line(RUNNING), line("Process exited with code 0\nOutput:\nok\n"),
                         line("Exit code: 0\nOutput:\nsecond\n")]) + "\n"
    assert CODEX_RULES.count([rollout]) == 2
    msgs = [Message("user", "go"),
            Message("assistant", tool_calls=(ToolCall("c0", "exec_command", {}, "shell", "x"),)),
            Message("tool", results=(ToolResult("c0", RUNNING),))]
    request = ModelRequest("openai-responses", "/v1/responses", {}, {}, b"",
                           Conversation("openai-responses", tuple(msgs)))
    gate = Gate(ScriptedBrain(Plan.from_json([{"finish": "done"}])), 5.0)
    gate.baseline = 0  # the run's first request had no results
    gate.on_request = gate.ack_request
    answered: list = []
    ask = threading.Thread(target=lambda: answered.append(gate.respond(request)))
    ask.start()
    ask.join(2)  # the poll request waits for no tool result: nothing finished yet
    assert answered and gate.timeouts == 0 and not ask.is_alive()


def test_the_llm_free_agent_behind_a_runtime_records_it(tmp_path: Path) -> None:
    agent = get_agent("llm-free", granularity="tool_call", runtime="codex",
                      families=["cbuild", "migrate"])
    assert isinstance(agent, LLMFreeAgent) and agent.reports_activity
    assert all(isinstance(a, RuntimeAgent) and a.brain == f for f, a in agent.agents.items())
    desc = agent.describe()
    assert desc is not None and desc["runtime"] == "codex" and desc["brain"] == "llm-free"
    assert desc["brains"] == {"cbuild": "cbuild", "migrate": "migrate"}
    assert desc["pinned_version"] == get_runtime("codex").spec.version
    assert get_agent("llm-free").describe() is None  # standalone: no runtime recorded
    tasks = agent.make_tasks(2, 0, tmp_path, repos=2)
    assert [t.family for t in tasks] == ["cbuild", "migrate"]
    assert all(ProgramTask.from_prompt(t.params["prompt"]).family == t.family for t in tasks)
