"""Benchmark: how fast the log readers read, beside a bare ``json.loads`` of the same bytes
(issue 14, item 6; target >= 50 MB/s for every format).

For every format of the reader table (``features.readers.READERS``) a generator writes a
large synthetic log (>= ``--mb`` MB, default 50) into a temp folder: a coding session of
model calls and tool calls (reads, edits, searches, test runs, commits) whose outputs vary
in size as real ones do. A format with no generator here is printed as "no generator",
never skipped silently (formats added to the table later join when a generator is added
to ``GENERATORS``). OpenHands V1 is measured in both of its forms (event list, conversation
directory). Each log is read with ``read_trajectory`` and, as the floor, parsed with a bare
``json.loads`` (the whole document, or line by line for JSONL); then the public fixtures
(``shared/fixtures``) and the hand-made logs of ``tests/data/readers`` the same way.

Each form is generated and measured in a fresh process (a spawned worker per form) from a
seed of its own, so its figures and its log do not depend on which forms ran before it: a
50 MB read leaves the heap slowing the next reads of the same process by up to 40 %
(reader and floor alike; user time, not the kernel's), which made every form after the
first look slower than it is.

Figures are MB (10**6 bytes) of the file per CPU second of this process (the best of
``--repeats``), so other processes on a shared machine distort them less; the load
average and a fixed pure-Python calibration loop are printed with them. ``ratio`` is the
reader's time over the floor's; the two take turns in each repeat, so the ratio is the
figure least moved by the load. Each read is cold (the remembered command verdicts and word
splits are forgotten before it: ``features.readers.clear_caches``), and a call is timed until
its result is in hand: freeing the result afterwards is not counted, for the reader and the
floor alike; the floor keeps its documents to the end under the same paused collector as the
reader (``features.gc_pause``).

Run: ``python benchmarks/bench_readers.py [--mb 50] [--repeats 3] [--formats NAME ...]``
(from a checkout other than the installed one, put it first: ``PYTHONPATH=.``)
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from features.gc_pause import gc_paused
from features.readers import READERS, clear_caches, detect_format, read_trajectory
from ripplecp_cli import opt, run

CLOCK = time.process_time
REPO = Path(__file__).resolve().parents[1]


def _fixtures() -> Path:
    """``$RIPPLECP_FIXTURES/trajectories``, else the first ``shared/fixtures/trajectories``
    above the checkout (as the tests find it)."""
    env = os.environ.get("RIPPLECP_FIXTURES")
    if env:
        return Path(env) / "trajectories"
    for up in REPO.parents:
        if (cand := up / "shared" / "fixtures" / "trajectories").is_dir():
            return cand
    return REPO.parent / "shared" / "fixtures" / "trajectories"


FIXTURES = _fixtures()
TARGET_MBPS = 50.0


@dataclass(frozen=True)
class Args:
    """Reader speed on large generated logs of every format and on the fixtures, beside a
    bare json.loads of the same bytes."""

    mb: float = opt(50.0, min=0.1)
    """size of each generated log, in MB"""
    repeats: int = opt(3, min=1)
    """reads per log (the best is the figure)"""
    formats: tuple[str, ...] = ()
    """only these formats (default: every format of the reader table)"""
    fixtures: bool = True
    """also read the public fixtures and the hand-made logs"""
    seed: int = opt(0, min=0)
    """one seed for the generated sessions"""


# ---------------------------------------------------------------------------------------
# a synthetic coding session, rendered by one writer per format
# ---------------------------------------------------------------------------------------

WORDS = ("def", "return", "self", "import", "value", "result", "config", "path", "items",
         "for", "in", "if", "else", "None", "True", "raise", "error", "data", "index", "len")


@dataclass
class Call:
    """One tool call of the session: what ran and what it returned."""

    kind: str  # "read", "edit", "search", "test", "commit", "shell"
    command: str
    output: str
    exit_code: int
    path: str = ""
    new_text: str = ""


def _text(rng: random.Random, n: int) -> str:
    """About ``n`` characters of code-like lines."""
    lines, size = [], 0
    while size < n:
        indent = "    " * rng.randrange(3)
        line = indent + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 12)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def session(rng: random.Random) -> Iterator[tuple[str, list[Call]]]:
    """Endless (thought, tool calls of one model response) of a plausible session."""
    files = [f"src/pkg/mod_{i}.py" for i in range(40)]
    n = 0
    while True:
        n += 1
        calls = []
        for _ in range(1 if rng.random() < 0.8 else 2):
            r = rng.random()
            f = rng.choice(files)
            size = int(min(60_000, rng.lognormvariate(7.0, 1.1)))  # median ~1.1 kB
            if r < 0.35:
                calls.append(Call("read", f"cat {f}", _text(rng, size), 0, f))
            elif r < 0.55:
                new = _text(rng, min(size, 3000))
                calls.append(Call("edit", f"sed -i 's/value/result/' {f}", "", 0, f, new))
            elif r < 0.7:
                calls.append(Call("search", f"grep -rn 'def {rng.choice(WORDS)}' src",
                                  _text(rng, size // 2), rng.choice((0, 1))))
            elif r < 0.85:
                failed = rng.randrange(3)
                calls.append(Call("test", "python -m pytest -q tests",
                                  _text(rng, size // 3) + f"=== {40 - failed} passed, {failed} "
                                  f"failed in 1.{rng.randrange(99):02d}s ===\n", int(failed > 0)))
            elif r < 0.9:
                calls.append(Call("commit", f"git add -A && git commit -qm 'step {n}'", "", 0))
            else:
                calls.append(Call("shell", f"python scripts/run_{n % 7}.py --n {n}",
                                  _text(rng, size), 0))
        yield f"Step {n}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(8, 40))), calls


def _iso(t: float, z: bool = True) -> str:
    s = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return s[:-3] + "Z" if z else s


class Sink:
    """A file written until it holds ``size`` bytes."""

    def __init__(self, path: Path, size: int) -> None:
        self.f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self.size = size
        self.written = 0

    def write(self, s: str) -> None:
        self.f.write(s)
        self.written += len(s)

    @property
    def full(self) -> bool:
        return self.written >= self.size

    def close(self) -> None:
        self.f.close()


def gen_codex_exec(path: Path, size: int, rng: random.Random) -> Path:
    sink = Sink(path, size)
    sink.write(json.dumps({"type": "thread.started", "thread_id": "bench-thread"}) + "\n")
    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    item = 0
    for thought, calls in session(rng):
        sink.write('{"type": "turn.started"}\n')
        sink.write(json.dumps({"type": "item.completed", "item": {
            "id": f"item_{item}", "type": "reasoning", "text": thought}}) + "\n")
        item += 1
        for c in calls:
            cmd = f"bash -lc {json.dumps(c.command)}"
            sink.write(json.dumps({"type": "item.started", "item": {
                "id": f"item_{item}", "type": "command_execution", "command": cmd,
                "aggregated_output": "", "status": "in_progress"}}) + "\n")
            sink.write(json.dumps({"type": "item.completed", "item": {
                "id": f"item_{item}", "type": "command_execution", "command": cmd,
                "aggregated_output": c.output, "exit_code": c.exit_code,
                "status": "completed"}}) + "\n")
            item += 1
        for k, v in (("input_tokens", 3000), ("cached_input_tokens", 2500), ("output_tokens", 90)):
            total[k] += v + rng.randrange(500)
        sink.write(json.dumps({"type": "turn.completed", "usage": dict(total)}) + "\n")
        if sink.full:
            break
    sink.close()
    return path


def gen_codex_rollout(path: Path, size: int, rng: random.Random) -> Path:
    sink = Sink(path, size)
    t = 1758763340.0

    def line(kind: str, payload: dict[str, Any]) -> None:
        sink.write(json.dumps({"timestamp": _iso(t), "type": kind, "payload": payload}) + "\n")

    line("session_meta", {"id": "0199bench-0000-7000-8000-000000000000", "timestamp": _iso(t),
                          "cwd": "/work/bench", "originator": "codex_cli_rs", "cli_version": "0.40.0"})
    line("event_msg", {"type": "user_message", "message": "make the tests pass"})
    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
             "reasoning_output_tokens": 0, "total_tokens": 0}
    n = 0
    for thought, calls in session(rng):
        t += rng.uniform(1, 6)
        line("event_msg", {"type": "agent_reasoning", "text": thought})
        last = {"input_tokens": 3000 + rng.randrange(900), "cached_input_tokens": 2500,
                "output_tokens": 80 + rng.randrange(300), "reasoning_output_tokens": 64,
                "total_tokens": 0}
        for k in total:
            total[k] += last[k]
        line("event_msg", {"type": "token_count", "info": {
            "total_token_usage": dict(total), "last_token_usage": last,
            "model_context_window": 272000}})
        for c in calls:
            n += 1
            line("response_item", {"type": "function_call", "name": "shell", "call_id": f"call_{n}",
                                   "arguments": json.dumps({"command": ["bash", "-lc", c.command],
                                                            "workdir": "/work/bench"})})
            t += rng.uniform(0.05, 3)
            line("response_item", {"type": "function_call_output", "call_id": f"call_{n}",
                                   "output": json.dumps({"output": c.output, "metadata": {
                                       "exit_code": c.exit_code,
                                       "duration_seconds": round(rng.uniform(0.01, 3), 3)}})})
        if sink.full:
            break
    sink.close()
    return path


def _chat_usage(rng: random.Random, k: int) -> dict[str, Any]:
    cached = 2500 + 40 * k
    return {"prompt_tokens": cached + rng.randrange(800), "completion_tokens": 60 + rng.randrange(300),
            "prompt_tokens_details": {"cached_tokens": cached}}


def gen_mini_swe_agent(path: Path, size: int, rng: random.Random) -> Path:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a shell."},
        {"role": "user", "content": "<pr_description>make the tests pass</pr_description>"}]
    t, written, k = 1773254000.0, 0, 0
    for thought, calls in session(rng):
        k += 1
        t += rng.uniform(1, 6)
        acts = [{"command": c.command, "tool_call_id": f"call_{k}_{j}"} for j, c in enumerate(calls)]
        msgs.append({"role": "assistant", "content": thought, "tool_calls": [
            {"id": a["tool_call_id"], "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": a["command"]})}} for a in acts],
            "extra": {"actions": acts, "cost": 0.004, "timestamp": t, "response": {
                "id": f"chatcmpl-{k}", "created": int(t), "usage": _chat_usage(rng, k)}}})
        for j, c in enumerate(calls):
            t += rng.uniform(0.05, 3)
            body = f"<returncode>{c.exit_code}</returncode>\n<output>\n{c.output}</output>"
            msgs.append({"role": "tool", "tool_call_id": f"call_{k}_{j}", "content": body,
                         "extra": {"raw_output": c.output, "returncode": c.exit_code,
                                   "timestamp": t, "exception_info": ""}})
            written += len(body) * 2 + len(thought) + 400
        if written >= size:
            break
    doc = {"info": {"model_stats": {"instance_cost": 0.004 * k, "api_calls": k},
                    "mini_version": "2.4.6", "exit_status": "LimitsExceeded", "submission": ""},
           "messages": msgs, "trajectory_format": "mini-swe-agent-1.1",
           "instance_id": "bench__bench-1"}
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path


def gen_swe_agent(path: Path, size: int, rng: random.Random) -> Path:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "SETTING: an autonomous programmer", "agent": "main",
         "message_type": "system_prompt"},
        {"role": "user", "content": "ISSUE: make the tests pass", "agent": "main",
         "message_type": "observation"}]
    traj: list[dict[str, Any]] = []
    written = 0
    for thought, calls in session(rng):
        for c in calls:
            action = (f"str_replace_editor create /testbed/{c.path}.new --file_text "
                      f"{shlex.quote(c.new_text)}" if c.kind == "edit" else c.command)
            history.append({"role": "assistant", "content": thought, "thought": thought,
                            "action": action, "agent": "main", "message_type": "action",
                            "tool_calls": [{"function": {"name": "bash", "arguments": json.dumps(
                                {"command": action})}, "id": f"call_{len(traj)}",
                                "type": "function"}]})
            history.append({"role": "tool", "content": c.output, "agent": "main",
                            "message_type": "observation", "tool_call_ids": [f"call_{len(traj)}"]})
            traj.append({"action": action, "observation": c.output, "response": thought,
                         "thought": thought, "execution_time": round(rng.uniform(0.01, 3), 3),
                         "state": {"open_file": f"/testbed/{c.path or 'n/a'}",
                                   "working_dir": "/testbed"}, "extra_info": {}})
            written += 2 * (len(c.output) + len(thought) + len(action)) + 500
        if written >= size:
            break
    doc = {"trajectory": traj, "history": history, "environment": "main",
           "info": {"exit_status": "submitted", "submission": "",
                    "model_stats": {"instance_cost": 0.1, "tokens_sent": 10**6,
                                    "tokens_received": 10**4, "api_calls": len(traj)}},
           "replay_config": json.dumps({"problem_statement": {"id": "bench__bench-2"}})}
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path


def gen_openhands(path: Path, size: int, rng: random.Random) -> Path:
    t = 1741000000.0
    evs: list[dict[str, Any]] = [{"id": 0, "timestamp": _iso(t, False), "source": "user",
                                  "message": "make the tests pass", "action": "message",
                                  "args": {"content": "make the tests pass"}}]
    written, k = 0, 0
    for thought, calls in session(rng):
        k += 1
        mr = {"id": f"chatcmpl-{k}", "created": int(t), "model": "claude-sonnet",
              "usage": {**_chat_usage(rng, k), "cache_read_input_tokens": 2500}}
        for c in calls:
            t += rng.uniform(0.5, 4)
            aid = len(evs)
            tcm = {"function_name": "execute_bash", "tool_call_id": f"toolu_{aid}",
                   "model_response": mr, "total_calls_in_response": len(calls)}
            if c.kind == "edit":
                evs.append({"id": aid, "timestamp": _iso(t, False), "source": "agent",
                            "message": f"Editing {c.path}", "action": "edit", "args": {
                                "path": f"/workspace/{c.path}", "command": "str_replace",
                                "old_str": "value", "new_str": c.new_text, "thought": thought},
                            "tool_call_metadata": tcm})
                t += rng.uniform(0.01, 0.2)
                evs.append({"id": aid + 1, "timestamp": _iso(t, False), "source": "agent",
                            "message": "edited", "cause": aid, "observation": "edit",
                            "content": c.new_text[:200], "extras": {
                                "path": f"/workspace/{c.path}", "prev_exist": True,
                                "old_content": "value", "new_content": c.new_text}})
            else:
                evs.append({"id": aid, "timestamp": _iso(t, False), "source": "agent",
                            "message": f"Running command: {c.command}", "action": "run",
                            "args": {"command": c.command, "is_input": False, "thought": thought,
                                     "blocking": False, "hidden": False},
                            "tool_call_metadata": tcm})
                t += rng.uniform(0.05, 3)
                evs.append({"id": aid + 1, "timestamp": _iso(t, False), "source": "agent",
                            "message": "Command finished", "cause": aid, "observation": "run",
                            "content": c.output, "extras": {"command": c.command, "metadata": {
                                "exit_code": c.exit_code, "pid": -1, "username": "openhands",
                                "hostname": "sandbox", "working_dir": "/workspace"}}})
            written += len(c.output) + 2 * len(c.new_text) + len(thought) + 900
        if written >= size:
            break
    path.write_text(json.dumps(evs, indent=1), encoding="utf-8")
    return path


def _v1_events(size: int, rng: random.Random) -> list[dict[str, Any]]:
    t = 1773254000.0
    n = 0

    def eid() -> str:
        nonlocal n
        n += 1
        return f"5a1d5379-b1d4-4772-9292-{n:012x}"

    def ts() -> str:
        return _iso(t, False)

    def text(s: str) -> list[dict[str, Any]]:
        return [{"cache_prompt": False, "type": "text", "text": s}]

    evs: list[dict[str, Any]] = [
        {"id": eid(), "timestamp": ts(), "source": "agent", "kind": "SystemPromptEvent",
         "system_prompt": {"type": "text", "text": "You are OpenHands agent."}, "tools": []},
        {"id": eid(), "timestamp": ts(), "source": "user", "kind": "MessageEvent",
         "llm_message": {"role": "user", "content": text("make the tests pass")}}]
    written, k = 0, 0
    for thought, calls in session(rng):
        k += 1
        for j, c in enumerate(calls):
            t += rng.uniform(0.5, 4)
            if c.kind == "edit":
                tool, action = "file_editor", {
                    "command": "str_replace", "path": f"/workspace/{c.path}", "old_str": "value",
                    "new_str": c.new_text, "file_text": None, "insert_line": None,
                    "view_range": None, "kind": "FileEditorAction"}
                obs = {"content": text(f"The file /workspace/{c.path} has been edited."),
                       "is_error": False, "command": "str_replace", "path": f"/workspace/{c.path}",
                       "prev_exist": True, "old_content": "value", "new_content": c.new_text,
                       "kind": "FileEditorObservation"}
            else:
                tool, action = "terminal", {"command": c.command, "is_input": False,
                                            "timeout": None, "reset": False, "kind": "TerminalAction"}
                obs = {"content": text(c.output), "is_error": False, "command": c.command,
                       "exit_code": c.exit_code, "timeout": False, "metadata": {
                           "exit_code": c.exit_code, "pid": -1, "username": "openhands",
                           "hostname": "sandbox", "working_dir": "/workspace",
                           "py_interpreter_path": "/usr/bin/python", "prefix": "", "suffix": ""},
                       "kind": "TerminalObservation"}
            a = {"id": eid(), "timestamp": ts(), "source": "agent", "kind": "ActionEvent",
                 "thought": text(thought) if j == 0 else [], "action": action, "tool_name": tool,
                 "tool_call_id": f"toolu_{k}_{j}", "llm_response_id": f"chatcmpl-{k}",
                 "tool_call": {"id": f"toolu_{k}_{j}", "name": tool,
                               "arguments": json.dumps(action), "origin": "completion"}}
            t += rng.uniform(0.05, 3)
            evs += [a, {"id": eid(), "timestamp": ts(), "source": "environment",
                        "kind": "ObservationEvent", "tool_name": tool,
                        "tool_call_id": a["tool_call_id"], "observation": obs, "action_id": a["id"]}]
            written += len(c.output) + 3 * len(c.new_text) + len(thought) + 1300
        if written >= size:
            return evs


def gen_openhands_v1(path: Path, size: int, rng: random.Random) -> Path:
    path.write_text(json.dumps(_v1_events(size, rng), indent=1), encoding="utf-8")
    return path


def gen_openhands_v1_directory(path: Path, size: int, rng: random.Random) -> Path:
    events = path / "events"
    events.mkdir(parents=True)
    for i, e in enumerate(_v1_events(size, rng)):
        (events / f"event-{i:05d}-{e['id']}.json").write_text(json.dumps(e), encoding="utf-8")
    return path


def _claude_records(size: int, rng: random.Random, as_session: bool) -> Iterator[dict[str, Any]]:
    """The records of a Claude Code run (``as_session``: the session file's shape with uuid
    chains and timestamps; else ``--output-format stream-json``'s), until ``size`` bytes of
    JSON text have been yielded."""
    sid = "dd386a40-0000-4000-8000-00000000bench"
    t = 1764620000.0
    written = 0
    parent: str | None = None
    n = 0

    def rec(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal parent, written, n
        n += 1
        uid = f"u-{n:08d}"
        if as_session:
            obj = {"parentUuid": parent, "isSidechain": False, **obj, "uuid": uid,
                   "timestamp": _iso(t), "sessionId": sid, "version": "2.1.197",
                   "cwd": "/work/bench"}
            parent = uid
        else:
            obj = {**obj, "parent_tool_use_id": None, "session_id": sid, "uuid": uid}
        written += len(json.dumps(obj)) + 1
        return obj

    if not as_session:
        yield rec({"type": "system", "subtype": "init", "cwd": "/work/bench", "session_id": sid,
                   "tools": ["Bash", "Read", "Edit"], "model": "bench"})
    yield rec({"type": "user", "message": {"role": "user", "content": "make the tests pass"}})
    msg = 0
    for thought, calls in session(rng):
        msg += 1
        t += rng.uniform(1, 6)
        usage = {"input_tokens": 3000 + rng.randrange(900), "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 2500, "output_tokens": 80 + rng.randrange(300)}
        blocks: list[dict[str, Any]] = [{"type": "text", "text": thought}]
        results = []
        for i, c in enumerate(calls):
            tid = f"toolu_{msg:07d}_{i}"
            if c.kind == "read":
                blocks.append({"type": "tool_use", "id": tid, "name": "Read",
                               "input": {"file_path": f"/work/bench/{c.path}"}})
            elif c.kind == "edit":
                blocks.append({"type": "tool_use", "id": tid, "name": "Edit", "input": {
                    "file_path": f"/work/bench/{c.path}", "old_string": "value",
                    "new_string": c.new_text or "result"}})
            else:
                blocks.append({"type": "tool_use", "id": tid, "name": "Bash",
                               "input": {"command": c.command}})
            results.append({"type": "tool_result", "tool_use_id": tid,
                            "content": c.output or "(Bash completed with no output)",
                            "is_error": c.exit_code != 0})
        for b in blocks:  # one record per content block, as Claude Code writes them
            yield rec({"type": "assistant", "message": {
                "id": f"msg_{msg:08d}", "type": "message", "role": "assistant", "model": "bench",
                "content": [b], "stop_reason": "tool_use", "usage": usage}})
        for r in results:
            t += rng.uniform(0.05, 3)
            yield rec({"type": "user", "message": {"role": "user", "content": [r]}})
        if written >= size:
            break
    if not as_session:
        yield rec({"type": "result", "subtype": "success", "is_error": False, "num_turns": msg,
                   "duration_ms": 1000 * msg, "session_id": sid, "total_cost_usd": 0.01 * msg,
                   "usage": {"input_tokens": 3000 * msg, "output_tokens": 200 * msg}})


def _write_jsonl(path: Path, records: Iterator[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def gen_claude_code_stream(path: Path, size: int, rng: random.Random) -> Path:
    return _write_jsonl(path, _claude_records(size, rng, as_session=False))


def gen_claude_code_session(path: Path, size: int, rng: random.Random) -> Path:
    return _write_jsonl(path, _claude_records(size, rng, as_session=True))


def gen_gemini_cli_stream(path: Path, size: int, rng: random.Random) -> Path:
    sink = Sink(path, size)
    t = 1762074000.0

    def line(obj: dict[str, Any]) -> None:
        nonlocal t
        t += rng.random()
        sink.write(json.dumps({**obj, "timestamp": _iso(t)}, separators=(",", ":")) + "\n")

    line({"type": "init", "session_id": "bench-session", "model": "gemini-2.5-pro"})
    line({"type": "message", "role": "user", "content": "Make the tests pass."})
    n, tools = 0, 0
    for thought, calls in session(rng):
        words = thought.split(" ")
        cut = len(words) // 2
        for piece in (" ".join(words[:cut]) + " ", " ".join(words[cut:])):
            line({"type": "message", "role": "assistant", "content": piece, "delta": True})
        ids = []
        for c in calls:
            n += 1
            tid = f"tool-{n}"
            ids.append((tid, c))
            if c.kind == "edit":
                line({"type": "tool_use", "tool_name": "replace", "tool_id": tid,
                      "parameters": {"file_path": c.path, "old_string": "value",
                                     "new_string": c.new_text}})
            elif c.kind == "read":
                line({"type": "tool_use", "tool_name": "read_file", "tool_id": tid,
                      "parameters": {"file_path": c.path}})
            else:
                line({"type": "tool_use", "tool_name": "run_shell_command", "tool_id": tid,
                      "parameters": {"command": c.command, "description": "run"}})
        for tid, c in ids:
            tools += 1
            line({"type": "tool_result", "tool_id": tid, "status": "success",
                  "output": c.output})
        if sink.full:
            break
    line({"type": "result", "status": "success", "stats": {
        "total_tokens": 3100 * n, "input_tokens": 3000 * n, "output_tokens": 100 * n,
        "cached": 2000 * n, "input": 1000 * n, "duration_ms": 1000 * n, "tool_calls": tools}})
    sink.close()
    return path


def gen_aider_chat(path: Path, size: int, rng: random.Random) -> Path:
    sink = Sink(path, size)
    sink.write("\n# aider chat started at 2025-03-04 10:15:02\n\n> Aider v0.86.2  \n"
               "> Model: openai/bench with diff edit format  \n")
    sent = 0
    for n, (thought, calls) in enumerate(session(rng)):
        if n % 5 == 0:
            sink.write(f"\n#### {thought}  \n")
        # a reply as Aider's models write them: prose, then each edit as a SEARCH/REPLACE
        # block holding the old and the new code
        reply = [thought, "", _text(rng, int(min(20_000, rng.lognormvariate(6.5, 1.0)))), ""]
        tool = []
        for c in calls:
            if c.kind == "edit":
                reply += [c.path, "```python", "<<<<<<< SEARCH",
                          _text(rng, len(c.new_text)).rstrip("\n"), "=======",
                          c.new_text.rstrip("\n"), ">>>>>>> REPLACE", "```", ""]
                tool.append(f"Applied edit to {c.path}")
            elif c.kind == "commit":
                tool.append(f"Commit {rng.randrange(16**7):07x} feat: step {n}")
            else:
                reply += ["```bash", c.command, "```", ""]
                tool += [c.command, "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]: y",
                         f"Running {c.command}",
                         "Add command output to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y",
                         f"Added {c.output.count(chr(10)) + 1} lines of output to the chat."]
        sent += 1000 + rng.randrange(20000)
        tok = f"Tokens: {sent / 1000:.1f}k sent, {rng.randrange(999)} received."
        sink.write("\n" + "\n".join(reply).strip() + "\n\n")
        sink.write("".join(f"> {x}  \n" for x in [tok, *tool]))
        if sink.full:
            break
    sink.close()
    return path


def gen_aider_llm_history(path: Path, size: int, rng: random.Random) -> Path:
    sink = Sink(path, size)
    t = 1741083302.0
    history: list[str] = []
    for thought, calls in session(rng):
        t += 5
        sink.write(f"TO LLM {datetime.fromtimestamp(t, UTC):%Y-%m-%dT%H:%M:%S}\n-------\n"
                   "SYSTEM Act as an expert software developer.\n")
        for h in history[-3:]:
            sink.write("-------\n" + "\n".join(f"USER {x}" for x in h.splitlines()) + "\n")
        t += 3
        sink.write(f"LLM RESPONSE {datetime.fromtimestamp(t, UTC):%Y-%m-%dT%H:%M:%S}\n"
                   f"ASSISTANT {thought}\n")
        history = history[-3:] + [c.output for c in calls if c.output]
        if sink.full:
            break
    sink.close()
    return path


def gen_cline_task(path: Path, size: int, rng: random.Random) -> Path:
    path.mkdir()
    ts = 1730000000000
    msgs: list[dict[str, Any]] = []
    written = 0

    def msg(typ: str, what: str, text: str) -> None:
        nonlocal ts, written
        ts += rng.randrange(50, 3000)
        msgs.append({"ts": ts, "type": typ, typ: what, "text": text})
        written += len(json.dumps(text)) + 40

    msg("say", "task", "Make the tests pass.")
    request = "<task>Make the tests pass.</task>"
    for thought, calls in session(rng):
        # the request text Cline shows: the tool results it sends, then the environment
        msg("say", "api_req_started", json.dumps({
            "request": request + "\n\n<environment_details>\n# Current Time\n...\n"
                       "</environment_details>", "tokensIn": rng.randrange(100), "tokensOut": rng.randrange(900),
            "cacheWrites": rng.randrange(2000), "cacheReads": rng.randrange(30000),
            "cost": rng.random() / 100}))
        msg("say", "text", thought)
        for c in calls:
            if c.kind == "edit":
                msg("say", "tool", json.dumps({"tool": "editedExistingFile", "path": c.path,
                                               "diff": c.new_text}))
            elif c.kind == "read":
                msg("say", "tool", json.dumps({"tool": "readFile", "path": c.path,
                                               "content": c.path}))
            else:
                msg("say", "command", c.command)
                msg("say", "command_output", c.output)
        request = "\n".join(f"[{c.command}] Result:\n{c.output}" for c in calls)
        if written >= size:
            break
    (path / "ui_messages.json").write_text(json.dumps(msgs, separators=(",", ":")))
    (path / "api_conversation_history.json").write_text("[]")
    return path


#: format name -> generator(path, size in bytes, rng) -> the log written
GENERATORS: dict[str, Callable[[Path, int, random.Random], Path]] = {
    "codex-exec": gen_codex_exec,
    "codex-rollout": gen_codex_rollout,
    "claude-code-stream": gen_claude_code_stream,
    "claude-code-session": gen_claude_code_session,
    "mini-swe-agent": gen_mini_swe_agent,
    "swe-agent": gen_swe_agent,
    "openhands": gen_openhands,
    "openhands-v1": gen_openhands_v1,
    "gemini-cli-stream": gen_gemini_cli_stream,
    "aider-chat": gen_aider_chat,
    "aider-llm-history": gen_aider_llm_history,
    "cline-task": gen_cline_task,
}
#: further forms of a format measured under their own label
FORMS: dict[str, tuple[str, Callable[[Path, int, random.Random], Path]]] = {
    "openhands-v1 (directory)": ("openhands-v1", gen_openhands_v1_directory),
}


# ---------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------


def log_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def bare_parse(path: Path, layout: str) -> object:
    """The floor: ``json.loads`` of the same bytes (every file of a directory), the
    documents kept to the end as a reader keeps them, under the same paused collector."""
    with gc_paused():
        return _bare_parse(path, layout)


def _bare_parse(path: Path, layout: str) -> object:
    if path.is_dir():
        if not (path / "events").is_dir():  # a Cline task folder: its JSON files
            return [json.loads(p.read_bytes()) for p in sorted(path.glob("*.json"))]
        return [json.loads(p.read_bytes()) for p in sorted((path / "events").glob("event-*.json"))]
    data = path.read_bytes()
    if layout == "text":  # no JSON to parse: the floor is the text cut into lines
        return data.decode("utf-8").split("\n")
    if layout == "jsonl":
        return [json.loads(line) for line in data.splitlines() if line.strip()]
    return json.loads(data)


def best_cpu(fns: Sequence[Callable[[], object]], repeats: int, min_s: float = 0.0,
             before: Sequence[Callable[[], None] | None] = ()) -> list[float]:
    """The least CPU seconds each of ``fns`` took over ``repeats`` rounds (each run repeated
    until it took ``min_s``, for small files): on a shared machine the least disturbed run.
    The functions take turns within each round, so that the reader and its floor see the
    same load and their ratio is comparable across runs. The clock covers the call until
    its result is in hand; freeing the result (and ``before[j]``, run ahead of each call)
    is outside it, for the reader and the floor alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for j, fn in enumerate(fns):
            setup = before[j] if j < len(before) else None
            n, spent = 0, 0.0
            while True:
                if setup is not None:
                    setup()
                t0 = CLOCK()
                result = fn()
                spent += CLOCK() - t0
                del result
                n += 1
                if spent >= min_s:
                    break
            best[j] = min(best[j], spent / n)
    return best


def measure(label: str, path: Path, layout: str, repeats: int, min_s: float = 0.0) -> str:
    size = log_bytes(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n_events = len(read_trajectory(path).events)
        read_s, json_s = best_cpu((lambda: read_trajectory(path),
                                   lambda: bare_parse(path, layout)), repeats, min_s,
                                  before=(clear_caches, None))
    mbps = size / read_s / 1e6
    flag = "ok" if mbps >= TARGET_MBPS else "below"
    return (f"{label:<34}{size / 1e6:>8.2f}{n_events:>9}{mbps:>9.1f}"
            f"{size / json_s / 1e6:>9.1f}{read_s / json_s:>7.1f}x"
            f"{n_events / read_s / 1e3:>9.1f}  {flag}")


def _is_log_dir(path: Path) -> bool:
    return any(r.detect_dir is not None and r.detect_dir(path) for r in READERS)


def calibration() -> float:
    """Million simple Python loop iterations per CPU second (machine speed reference)."""
    n, t, acc = 2_000_000, CLOCK(), 0
    for i in range(n):
        acc += i & 7
    return n / (CLOCK() - t) / 1e6


HEADER = (f"{'log':<34}{'MB':>8}{'events':>9}{'MB/s':>9}{'json':>9}{'ratio':>8}"
          f"{'kev/s':>9}  target {TARGET_MBPS:g} MB/s")


def _measure_form(label: str, fmt: str, layout: str, size: int, seed: int, repeats: int
                  ) -> tuple[str, float]:
    """One form's row (in a fresh process): its log generated from a seed of its own (the
    same log whichever forms are measured with it), measured, removed."""
    gen = GENERATORS[fmt] if label == fmt else FORMS[label][1]
    folder = Path(tempfile.mkdtemp(prefix="bench_readers_"))
    try:
        t0 = time.perf_counter()
        path = gen(folder / label.replace(" ", "_").strip("()"), size,
                   random.Random(f"{seed}:{label}"))
        gen_s = time.perf_counter() - t0
        return measure(label, path, layout, repeats), gen_s
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def bench(args: Args) -> int:
    layouts = {r.name: r.layout for r in READERS}
    wanted = set(args.formats)
    unknown = wanted - set(layouts)
    if unknown:
        raise ValueError(f"argument --formats: unknown {sorted(unknown)}; the table holds "
                         f"{', '.join(layouts)}")
    size = int(args.mb * 1e6)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"calibration {calibration():.1f} M loop iterations / CPU s")
    print(f"generated logs (>= {args.mb:g} MB each; MB/s of CPU time, best of "
          f"{args.repeats}; json = bare json.loads of the same bytes)")
    print(HEADER)
    below = 0
    jobs = [(r.name, r.name) for r in READERS if not wanted or r.name in wanted]
    jobs += [(label, fmt) for label, (fmt, _) in FORMS.items() if not wanted or fmt in wanted]
    # each form in a process of its own: a read of a 50 MB log leaves the heap in a state
    # that slows the next one down (user time of a 10 MB rollout read 160 -> 280 ms after
    # a 50 MB exec log was read and freed in the same process), reader and json.loads alike
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        for label, fmt in jobs:
            if (GENERATORS.get(fmt) if label == fmt else FORMS[label][1]) is None:
                print(f"{label:<34}no generator")
                continue
            row, gen_s = pool.submit(_measure_form, label, fmt, layouts[fmt], size, args.seed,
                                     args.repeats).result()
            below += row.endswith("below")
            print(f"{row}   (generated in {gen_s:.0f} s)", flush=True)
    if args.fixtures:
        print("\nfixtures and hand-made logs (each read for >= 0.2 CPU s per repeat)")
        print(HEADER)
        logs = sorted(p for p in (REPO / "tests" / "data" / "readers").glob("*/*")
                      if p.parent.name != "adversarial" and p.name != "README.md"
                      and (p.is_file() or _is_log_dir(p)))  # not a session's subagents/
        if FIXTURES.is_dir():
            logs = sorted(p for p in FIXTURES.glob("*/*") if p.is_file() and p.suffix in (
                ".json", ".jsonl", ".traj") and not p.name.endswith(".report.json")) + logs
        else:
            print(f"(public fixtures absent: {FIXTURES})")
        for p in logs:
            fmt = detect_format(p)
            print(measure(f"{p.parent.name}/{p.name}"[:33], p, layouts[fmt], args.repeats, 0.2))
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    return 0 if not below else 1


def main(argv: list[str] | None = None) -> int:
    return run(bench, Args, argv, prog="python benchmarks/bench_readers.py")


if __name__ == "__main__":
    sys.exit(main())
