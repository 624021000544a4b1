"""The long-lived advisor server and its hooks (issue 30): several sessions at once, each
with its own budget and decision log, over the Unix socket (the standard-library command
client) and 127.0.0.1 (http hooks, with the state's token); one decision per boundary under
concurrent calls; install / uninstall exact and idempotent; check refusing in one line and
creating nothing; status; the other runtimes' hook payloads."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from oracle.store.checkpoint import CheckpointStore, state_digest
from ripplecp_policy import hook_install
from ripplecp_policy.advise import PROG, main
from ripplecp_policy.advisor import CP, read_decisions
from ripplecp_policy.advisor_server import serve
from ripplecp_policy.advisor_state import ServerConfig, token_of
from ripplecp_policy.datasets import replays
from ripplecp_policy.export import example_frame, log_policy_model
from ripplecp_policy.hook_client import request
from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, Setting

REPO = Path(__file__).resolve().parents[2]
SESSION = REPO / "tests" / "data" / "recordings" / "claude-code-2.1.197" / "task.session.jsonl"
ROLLOUT = REPO / "tests" / "data" / "recordings" / "codex-0.171.0" / "task.rollout.jsonl"
CLIENT = REPO / "ripplecp_policy" / "hook_client.py"
BUDGET = Budget("count", 2)


@pytest.fixture(scope="module")
def model(toy_label_set, tmp_path_factory) -> Path:
    """An eager xgboost policy (the budget decides) whose config says it was trained on codex."""
    ls = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    pol = AdvantageRegressorPolicy("xgboost", n_estimators=10, threshold=-1e9).fit(ls, Setting(BUDGET))
    obs: list = []
    for task in list(replays(ls).values())[:2]:
        pol.reset(task.task_id, 0)
        task.replay(pol.decide, BUDGET, trace=obs)
    path = log_policy_model(pol, BUDGET, example_frame(obs).head(3),
                            path=tmp_path_factory.mktemp("server") / "model")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def server(model: Path, tmp_path: Path):
    """A server in a thread of this process; (state, config)."""
    state = tmp_path / "state"
    conf = ServerConfig(model=str(model), port=_free_port(), idle_s=600,
                        pythonpath=str(REPO), store=str(tmp_path / "store"))
    conf.write(state)
    ready = threading.Event()
    t = threading.Thread(target=serve, args=(state, conf), kwargs={"ready": ready}, daemon=True)
    t.start()
    assert ready.wait(60)
    yield state, conf
    try:
        request(state, "POST", "/v1/shutdown", timeout=5)
    except OSError:
        pass
    t.join(30)


def _http(conf: ServerConfig, path: str, payload: dict | None, token: str | None) -> int:
    c = http.client.HTTPConnection("127.0.0.1", conf.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["X-Ripplecp-Token"] = token
    c.request("POST", path, body=json.dumps(payload or {}), headers=headers)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def _client(state: Path, runtime: str, payload: dict, query: str = "") -> subprocess.CompletedProcess:
    argv = [sys.executable, "-I", "-S", str(CLIENT), "--state", str(state), "--runtime", runtime]
    if query:
        argv += ["--query", query]
    return subprocess.run(argv, input=json.dumps(payload), capture_output=True, text=True,
                          timeout=120, env={"PATH": os.environ["PATH"]})


def test_several_sessions_each_with_its_own_budget_and_log(server, tmp_path: Path) -> None:
    """Two Claude Code sessions, one through http hooks, one through the command client, a
    transcript growing between calls: each boundary decided once, each session's budget and
    log its own, every checkpoint restorable to its logged digest."""
    state, conf = server
    lines = SESSION.read_bytes().splitlines(keepends=True)
    token = token_of(state)
    ws = {}
    for name in ("a", "b"):
        ws[name] = tmp_path / f"ws-{name}"
        ws[name].mkdir()
        (ws[name] / "f.txt").write_text(name)
    budgets = {"a": "count:2", "b": "count:1"}
    for cut in range(1, len(lines) + 1):
        for name in ("a", "b"):
            transcript = tmp_path / f"{name}.jsonl"
            transcript.write_bytes(b"".join(lines[:cut]))
            payload = {"session_id": f"sess-{name}", "transcript_path": str(transcript),
                       "cwd": str(ws[name]), "hook_event_name": "PostToolUse"}
            query = f"budget={budgets[name]}"
            if name == "a":
                assert _http(conf, f"/v1/hook/claude-code?{query}", payload, token) == 200
            else:
                p = _client(state, "claude-code", payload, query)
                assert p.returncode == 0 and not p.stderr, p.stderr
    from features.readers import read_trajectory

    n_bounds = len(read_trajectory(SESSION).boundaries("tool_call"))
    store = CheckpointStore(tmp_path / "store")
    for name, cps in (("a", 2), ("b", 1)):
        recs = read_decisions(state / "sessions" / f"sess-{name}.jsonl")
        assert {r["session"] for r in recs} == {f"sess-{name}"}
        assert [r["boundary"] for r in recs] == list(range(1, n_bounds + 1))
        taken = [r for r in recs if r["decision"] == CP]
        assert len(taken) == cps
        for r in taken:
            dest = tmp_path / f"restored-{name}-{r['boundary']}"
            assert store.restore(r["checkpoint_id"], dest).state_digest == r["state_digest"] \
                == state_digest(dest)
            assert (dest / "f.txt").read_text() == name
    status = json.loads(request(state, "GET", "/v1/status")[1])
    by = {s["session"]: s for s in status["sessions"]}
    assert by["sess-a"]["remaining"] == 0 and by["sess-b"]["checkpoints"] == 1
    assert by["sess-a"]["decisions"] == n_bounds and by["sess-a"]["flagged"] in (True, False)


def test_the_tcp_port_wants_the_token_and_listens_on_loopback_only(server) -> None:
    state, conf = server
    payload = {"session_id": "x", "transcript_path": str(SESSION), "hook_event_name": "PostToolUse"}
    assert _http(conf, "/v1/hook/claude-code", payload, None) == 403
    assert _http(conf, "/v1/hook/claude-code", payload, "wrong") == 403
    assert not (state / "sessions" / "x.jsonl").exists()
    listening = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, _, st = line.split()[1:4]
        addr, port = local.split(":")
        if int(port, 16) == conf.port and st == "0A":
            listening.append(addr)
    assert listening == ["0100007F"]  # 127.0.0.1, no other interface
    assert (os.stat(state).st_mode & 0o077) == 0


def test_concurrent_calls_decide_each_boundary_once(server, tmp_path: Path) -> None:
    state, conf = server
    lines = SESSION.read_bytes().splitlines(keepends=True)
    token = token_of(state)
    transcript = tmp_path / "t.jsonl"
    for cut in (len(lines) // 3, 2 * len(lines) // 3, len(lines)):
        transcript.write_bytes(b"".join(lines[:cut]))
        payload = {"session_id": "busy", "transcript_path": str(transcript), "cwd": str(tmp_path),
                   "hook_event_name": "PostToolUse"}
        threads = [threading.Thread(target=_http, args=(conf, "/v1/hook/claude-code", payload, token))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    recs = read_decisions(state / "sessions" / "busy.jsonl")
    bounds = [r["boundary"] for r in recs if r["boundary"] is not None]
    assert bounds and len(bounds) == len(set(bounds)) and sum(r["decision"] == CP for r in recs) <= 2


def test_hook_payloads_of_other_runtimes(server, tmp_path: Path) -> None:
    """Codex's PostToolUse payload names its rollout (followed); Gemini CLI's AfterTool and the
    OpenHands SDK's PostToolUse payloads keep the command-hook contract (JSON on stdin, exit
    0) but their transcripts have no line reader: one SKIP per call saying so."""
    state, _ = server
    ws = tmp_path / "ws"
    ws.mkdir()
    codex = {"session_id": "019d-codex", "transcript_path": str(ROLLOUT), "cwd": str(ws),
             "hook_event_name": "PostToolUse", "model": "loopback", "turn_id": "t1",
             "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_response": "a\n"}
    assert _client(state, "codex", codex).returncode == 0
    recs = read_decisions(state / "sessions" / "019d-codex.jsonl")
    assert recs and recs[-1]["decision"] == CP and recs[-1]["reason"] == "policy"
    gemini = {"session_id": "g1", "transcript_path": str(tmp_path / "chat.json"), "cwd": str(ws),
              "hook_event_name": "AfterTool", "timestamp": "2026-01-01T00:00:00Z",
              "tool_name": "run_shell_command", "tool_input": {"command": "ls"},
              "tool_response": {"llmContent": "a"}}
    openhands = {"session_id": "oh1", "hook_event_name": "PostToolUse", "tool_name": "terminal",
                 "tool_input": {"command": "ls"}, "tool_response": {"output": "a"},
                 "working_dir": str(ws)}
    for runtime, payload, sid in (("gemini", gemini, "g1"), ("openhands", openhands, "oh1")):
        p = _client(state, runtime, payload)
        assert p.returncode == 0 and not p.stdout
        recs = read_decisions(state / "sessions" / f"{sid}.jsonl")
        assert [r["decision"] for r in recs] == ["SKIP"]
        assert "no line reader" in recs[0]["reason"]


def test_the_command_client_fails_open_and_starts_a_server(model: Path, tmp_path: Path) -> None:
    """No server: the client starts one in the background and exits 0 at once; a broken
    configuration is a line on stderr, exit 0."""
    state = tmp_path / "state"
    ServerConfig(model=str(model), idle_s=5, pythonpath=str(REPO)).write(state)
    payload = {"session_id": "s", "transcript_path": str(SESSION), "hook_event_name": "PostToolUse"}
    p = _client(state, "claude-code", payload)
    assert p.returncode == 0
    p = subprocess.run([sys.executable, "-I", "-S", str(CLIENT), "--state", str(state), "--start",
                        "--wait-s", "120"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0
    try:
        assert request(state, "GET", "/v1/ping")[0] == 200
    finally:
        request(state, "POST", "/v1/shutdown")
    p = subprocess.run([sys.executable, "-I", "-S", str(CLIENT), "--nonsense"], input="{}",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "skipped" in p.stderr


# ----------------------------------------------------------------------------- set-up commands


def _main(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_check_refuses_in_one_line_and_creates_nothing(model: Path, tmp_path: Path, capsys,
                                                       monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RIPPLECP_MLRUNS", raising=False)
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = [
        (["check", "--model", "runs:/0123/policy", "--no-hooks"], "no MLflow store"),
        (["check", "--model", "models:/m-1", "--mlruns", str(tmp_path / "nowhere"), "--no-hooks"],
         "no such directory"),
        (["check", "--model", str(tmp_path), "--no-hooks"], "does not load"),
        (["check", "--model", str(model), "--store", str(tmp_path / "a" / "b" / "store"),
          "--no-hooks"], "does not exist"),
        (["check", "--model", str(model), "--state", str(tmp_path / "state")], "hooks not installed"),
        (["check", "--state", str(tmp_path / "state")], "no advisor configured"),
    ]
    for argv, needle in cases:
        code, out, err = _main(argv, capsys)
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"{PROG} check: error: "), err
        assert needle in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created
    code, out, _ = _main(["check", "--model", str(model), "--no-hooks"], capsys)
    assert code == 0 and "ok: model" in out


def test_serve_refuses_a_model_that_does_not_load(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "ripplecp_policy.advise", "serve", "--state",
                        str(tmp_path / "state"), "--model", "runs:/abc/policy", "--mlruns",
                        str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no MLflow store" in p.stderr
    assert not (tmp_path / "state").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_server_starts_from_its_kept_model_and_stops_when_the_store_no_longer_has_it(
        toy_label_set, tmp_path: Path) -> None:
    """The first start reads a runs:/ model from its store and keeps it in the state; the
    next start serves the kept copy (no MLflow before it answers) and reads the store again
    in the background: a model gone from there stops the server, saying why."""
    import shutil
    import time

    import mlflow

    from ripplecp_policy.hook_client import _ping
    from ripplecp_policy.tracking import ensure_experiment, tracking_uri

    ls = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    pol = AdvantageRegressorPolicy("ridge").fit(ls, Setting(BUDGET))
    obs: list = []
    task = next(iter(replays(ls).values()))
    pol.reset(task.task_id, 0)
    task.replay(pol.decide, BUDGET, trace=obs)
    root, state = tmp_path / "mlruns", tmp_path / "state"
    exp = ensure_experiment("server", root)
    mlflow.set_tracking_uri(tracking_uri(root))
    try:
        with mlflow.start_run(experiment_id=exp) as run:
            log_policy_model(pol, BUDGET, example_frame(obs).head(3), name="policy")
    finally:
        mlflow.set_tracking_uri((tmp_path / "elsewhere").as_uri())
    ServerConfig(model=f"runs:/{run.info.run_id}/policy", mlruns=str(root), idle_s=600,
                 pythonpath=str(REPO)).write(state)

    def start() -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-m", "ripplecp_policy.advise", "serve", "--state",
                              str(state)], stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
        end = time.monotonic() + 120
        while not _ping(str(state)):
            assert p.poll() is None and time.monotonic() < end, p.stderr.read()[-2000:]
            time.sleep(0.05)
        return p

    first = start()
    request(state, "POST", "/v1/shutdown", timeout=5)
    assert first.wait(60) == 0
    kept = list((state / "models").iterdir())
    assert len(kept) == 1 and (kept[0] / "MLmodel").is_file()
    # the kept copy and the store's files differ (a file the model loads without): the
    # store's win, for the sessions from then on, and the server goes on
    example = kept[0] / "input_example.json"
    store_example = example.read_bytes()
    example.write_bytes(store_example + b" ")
    second = start()
    end = time.monotonic() + 120
    while example.read_bytes() != store_example:  # the re-read brought the store's files
        assert time.monotonic() < end and second.poll() is None
        time.sleep(0.1)
    time.sleep(3.0)  # (reading the new files from the kept copy takes ~0.1 s)
    request(state, "POST", "/v1/shutdown", timeout=5)
    assert second.wait(60) == 0
    err = second.stderr.read()
    assert "changed in its store; sessions from now on follow the new files" in err, err
    for mlmodel in list(root.rglob("MLmodel")):  # the model gone from its store
        shutil.rmtree(mlmodel.parent)
    third = start()  # answers: served from the kept copy
    assert third.wait(120) == 0  # ... until the store is read again
    err = third.stderr.read()
    assert "no longer loads from its store" in err and "stopping" in err, err
    assert not kept[0].exists()  # never served again: the next start refuses
    p = subprocess.run([sys.executable, "-m", "ripplecp_policy.advise", "serve", "--state",
                        str(state)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr


@pytest.mark.parametrize("runtime", ["claude-code", "codex"])
def test_install_is_idempotent_and_uninstall_removes_exactly_what_it_wrote(
        runtime: str, model: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    state = tmp_path / "state"
    target = hook_install.config_file(runtime, "project", project)
    target.parent.mkdir()
    mine = {"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "echo mine"}]}]}, "other": {"keep": True}}
    target.write_text(json.dumps(mine, indent=2))
    argv = ["install", "--runtime", runtime, "--model", str(model), "--project", str(project),
            "--state", str(state), "--budget", "count:2"]
    code, out, err = _main(argv, capsys)
    assert code == 0, err
    first = json.loads(target.read_text())
    assert first["other"] == {"keep": True} and mine["hooks"]["PostToolUse"][0] in first["hooks"]["PostToolUse"]
    assert len(first["hooks"]["PostToolUse"]) == 2 and "SessionStart" in first["hooks"]
    if runtime == "claude-code":
        http = first["hooks"]["PostToolUse"][1]["hooks"][0]
        assert http["type"] == "http" and http["url"].startswith("http://127.0.0.1:")
        assert http["headers"]["X-Ripplecp-Token"] == token_of(state)
    else:
        assert " -I -S " in first["hooks"]["PostToolUse"][1]["hooks"][0]["command"]
    code, out, _ = _main(argv, capsys)
    assert code == 0 and "already installed" in out
    assert json.loads(target.read_text()) == first
    code, out, _ = _main(["check", "--state", str(state), "--runtime", runtime], capsys)
    assert code == 0 and "hooks installed" in out, out
    code, out, _ = _main(["uninstall", "--state", str(state), "--project", str(project)], capsys)
    assert code == 0 and json.loads(target.read_text()) == mine
    code, _, err = _main(["check", "--state", str(state), "--runtime", runtime], capsys)
    assert code == 2 and "hooks not installed" in err
    # a file install created is removed with its last hook
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _main([*argv[:5], "--project", str(fresh), "--state", str(tmp_path / "s2")], capsys)
    made = hook_install.config_file(runtime, "project", fresh)
    assert made.exists()
    _main(["uninstall", "--state", str(tmp_path / "s2")], capsys)
    assert not made.exists()
    # a settings file that is not JSON: one line, nothing written
    target.write_text("{not json")
    code, _, err = _main(argv, capsys)
    assert code == 2 and "not JSON" in err and target.read_text() == "{not json"


def test_status_from_the_logs_flags_out_of_range(tmp_path: Path, capsys) -> None:
    state = tmp_path / "state"
    (state / "sessions").mkdir(parents=True)
    rec = {"session": "far", "boundary": 1, "decision": "SKIP", "remaining_budget": 2.0,
           "out_of_range": 0.6, "reason": "policy"}
    (state / "sessions" / "far.jsonl").write_text(json.dumps(rec) + "\n")
    near = dict(rec, session="near", out_of_range=0.0)
    (state / "sessions" / "near.jsonl").write_text(json.dumps(near) + "\n")
    code, out, _ = _main(["status", "--state", str(state)], capsys)
    assert code == 0 and "no server up" in out
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "FLAGGED" in rows["far"] and "FLAGGED" not in rows["near"]


def test_idle_sessions_end_and_stay_in_the_status(model: Path, tmp_path: Path) -> None:
    """A session without calls for the idle time is ended (memory bounded by live sessions);
    a later call rebuilds it from its log, deciding no boundary twice."""
    from ripplecp_policy.advisor import load_model
    from ripplecp_policy.advisor_server import AdvisorServer

    app = AdvisorServer(tmp_path / "state", ServerConfig(model=str(model)), load_model(model))
    lines = SESSION.read_bytes().splitlines(keepends=True)
    transcript = tmp_path / "t.jsonl"
    payload = {"session_id": "idle", "transcript_path": str(transcript), "cwd": str(tmp_path),
               "hook_event_name": "PostToolUse"}
    transcript.write_bytes(b"".join(lines[: len(lines) // 2]))
    app.hook("claude-code", payload, {})
    assert app.evict_idle(3600) == 0
    app.sessions["claude-code:idle"].last_seen -= 7200
    assert app.evict_idle(3600) == 1 and not app.sessions
    assert [s["ended"] for s in app.status()["sessions"]] == [True]
    transcript.write_bytes(b"".join(lines))
    app.hook("claude-code", payload, {})
    recs = read_decisions(tmp_path / "state" / "sessions" / "idle.jsonl")
    bounds = [r["boundary"] for r in recs]
    assert bounds == sorted(set(bounds)) and sum(r["decision"] == CP for r in recs) <= 2
