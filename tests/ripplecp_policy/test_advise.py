"""``python -m ripplecp_policy.advise``: its command line, a recorded session replayed, and the
real runtimes followed end to end under a 2-checkpoint budget — Claude Code through its
``PostToolUse``/``Stop`` hooks, Codex CLI as the command the advisor runs — against the
loopback model server: at most 2 checkpoints, each restorable, the log consistent with the
store."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from features.readers import read_trajectory
from oracle.agents import runtimes
from oracle.agents.model_server import ModelServer, Plan, ScriptedBrain
from oracle.agents.runtimes import RuntimeInstallError
from oracle.store.checkpoint import CheckpointStore, state_digest
from ripplecp_cli import field_docs
from ripplecp_policy.advise import PROG, Args, hook, main
from ripplecp_policy.advisor import CP, read_decisions
from ripplecp_policy.datasets import replays
from ripplecp_policy.export import example_frame, log_policy_model
from ripplecp_policy.learned import AdvantageRegressorPolicy
from ripplecp_policy.policy import Budget, Setting

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "data" / "recordings" / "codex-0.171.0" / "task.exec.jsonl"
MODULE = "ripplecp_policy.advise"
BUDGET = Budget("count", 2)
#: five tool calls, one file each: more boundaries than the budget buys
FIVE_FILES = Plan.from_json([{"shell": f"printf '{n}\\n' > {n}.txt"}
                             for n in ("one", "two", "three", "four", "five")]
                            + [{"finish": "done"}])


def _run(*argv: str, cwd: Path = REPO, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", MODULE, *argv], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


@pytest.fixture(scope="module")
def model(toy_label_set, tmp_path_factory) -> Path:
    """An exported policy that wants a checkpoint at every boundary: the budget decides."""
    ls = toy_label_set(n_repos=3, tasks_per_repo=2, seed=3)
    pol = AdvantageRegressorPolicy("xgboost", n_estimators=20, threshold=-1e9).fit(ls, Setting(BUDGET))
    obs: list = []
    for task in list(replays(ls).values())[:2]:
        pol.reset(task.task_id, 0)
        task.replay(pol.decide, BUDGET, trace=obs)
    return log_policy_model(pol, BUDGET, example_frame(obs).head(3),
                            path=tmp_path_factory.mktemp("advise") / "model")


# ----------------------------------------------------------------------------- command line


def test_help_lists_every_option() -> None:
    p = _run("--help", timeout=120)
    assert p.returncode == 0 and p.stdout.startswith(f"usage: {PROG} "), p.stderr[-2000:]
    flat = re.sub(r"\s+", "", p.stdout)
    docs = field_docs(Args)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        assert flag in p.stdout and docs.get(f.name), flag
        assert re.sub(r"\s+", "", docs[f.name]) in flat, flag
    assert "--no-echoturnsitoff" in flat and "--COMMAND" in flat


@pytest.mark.parametrize("argv, needle", [
    ([], "the following arguments are required: --model"),
    (["--model", "/nonexistent/m", "--input", str(RECORDING)], "argument --model: /nonexistent/m: no such directory"),
    (["--model", str(REPO), "--input", str(RECORDING)], "not an MLflow model folder"),
    (["--model", "runs:/x/policy", "--budget", "count:0", "--input", str(RECORDING)],
     "argument --budget: 'count:0': a count budget takes a positive integer"),
    (["--model", "runs:/x/policy", "--hook", "claude", "--input", str(RECORDING)],
     "invalid choice 'claude' (did you mean 'claude-code'?)"),
    (["--model", "runs:/x/policy", "--input", "/nonexistent.jsonl"], "argument --input: /nonexistent.jsonl: no such file"),
    (["--model", "runs:/x/policy", "--format", "codx", "--input", str(RECORDING)], "(did you mean 'codex'?)"),
    (["--model", "runs:/x/policy", "--budgt", "count:2"], "(did you mean '--budget'?)"),
])
def test_a_wrong_argument_is_one_line_and_exit_2(argv, needle, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and err.startswith(f"{PROG}: error: ")
    assert needle in err, err


@pytest.mark.parametrize("argv, needle", [
    (["--budget", "count:2"], "give exactly one of --input LOGFILE, --hook claude-code or -- COMMAND ..., got none"),
    (["--input", str(RECORDING), "--", "true"], "got --input and -- COMMAND"),
    (["--hook", "claude-code", "--format", "codex"], "argument --format: a Claude Code hook follows the session file"),
])
def test_modes_are_checked_before_any_work(argv, needle, model: Path, tmp_path: Path) -> None:
    p = _run("--model", str(model), "--log", str(tmp_path / "d.jsonl"), *argv, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr[-2000:]
    assert p.stderr.startswith(f"{PROG}: error: ") and needle in p.stderr, p.stderr
    assert not (tmp_path / "d.jsonl").exists()


def test_a_recorded_session_is_replayed_as_a_stream(model: Path, tmp_path: Path) -> None:
    p = _run("--model", str(model), "--budget", "count:2", "--input", str(RECORDING), "--log",
             str(tmp_path / "d.jsonl"), timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    recs = read_decisions(tmp_path / "d.jsonl")
    assert [r["decision"] for r in recs] == [CP, CP, "SKIP", "SKIP"]
    assert "4 decisions, 2 checkpoints" in p.stderr and "budget left 0 of 2ckpt" in p.stderr


def test_a_model_that_does_not_load_fails_open_at_run_time_and_loud_offline(tmp_path: Path,
                                                                          stops_servers) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "MLmodel").write_text("not: [a model\n")
    # a replay has no agent to protect: refused in one line, nothing written
    p = _run("--model", str(bad), "--budget", "count:2", "--input", str(RECORDING), "--log",
             str(tmp_path / "d.jsonl"), timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "did not load" in p.stderr, p.stderr
    assert not (tmp_path / "d.jsonl").exists()
    # the in-process hook: every boundary SKIP, saying why
    args = Args(model=str(bad), hook="claude-code", log=tmp_path / "h.jsonl", budget="count:2")
    session = RECORDING.parents[1] / "claude-code-2.1.197" / "task.session.jsonl"
    assert hook(args, io.StringIO(json.dumps({"transcript_path": str(session),
                                              "session_id": "s"}))) == 0
    recs = read_decisions(tmp_path / "h.jsonl")
    assert recs and all(r["decision"] == "SKIP" for r in recs)  # older ones: past
    assert "did not load" in recs[-1]["reason"]
    # a command whose advisor has no model still runs, and its exit status is kept
    p = _run("--model", str(bad), "--log", str(tmp_path / "e.jsonl"), "--state",
             str(tmp_path / "state"), "--wait", "0", "--", "sh", "-c",
             f"cat {RECORDING}; exit 3", timeout=120)
    assert p.returncode == 3 and p.stdout == RECORDING.read_text()
    assert "advisor skipped this session" in p.stderr or "not up" in p.stderr, p.stderr


def test_a_command_started_before_the_server_is_decided_live_once_it_is_up(
        model: Path, tmp_path: Path, stops_servers) -> None:
    """``--wait 0`` starts the command at once; the lines it writes after the server came up
    are decided as they come (the first two boundaries CP under count:2), not logged SKIP
    ``past`` as lines that came before it (a wrapper that marked every line after its first
    wait late skipped whole sessions)."""
    from ripplecp_policy.hook_client import ensure_server

    log, state = tmp_path / "d.jsonl", tmp_path / "state"
    # the command waits for the server the wrapper started, then writes the session (2 s
    # later: the wrapper's own wait polls every 50 ms, and a line that comes before it saw the
    # server answer is late by design)
    code = (f"import sys; sys.path.insert(0, {str(REPO)!r}); "
            "from ripplecp_policy.hook_client import ensure_server; "
            f"sys.exit(0 if ensure_server({str(state)!r}, wait_s=120) else 1)")
    wait_up = f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    p = _run("--model", str(model), "--budget", "count:2", "--log", str(log), "--state",
             str(state), "--wait", "0", "--", "sh", "-c", f"{wait_up} && sleep 2 && cat {RECORDING}",
             timeout=200)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == RECORDING.read_text()
    assert ensure_server(state)
    recs = read_decisions(log)
    assert [r["decision"] for r in recs] == [CP, CP, "SKIP", "SKIP"], recs
    assert not any(r["reason"].startswith("past") for r in recs), recs


def test_the_hook_never_fails_the_session(model: Path, tmp_path: Path, capsys) -> None:
    args = Args(model=str(model), hook="claude-code", log=tmp_path / "d.jsonl")
    assert hook(args, io.StringIO('{"transcript_path": "/nonexistent.jsonl"}')) == 0
    assert "advisor skipped this boundary" in capsys.readouterr().err
    assert hook(args, io.StringIO("not json")) == 0


# ----------------------------------------------------------------------------- real runtimes


def _ready(name: str) -> runtimes.Runtime:
    try:
        runtimes.install(name)
    except RuntimeInstallError as exc:
        pytest.skip(f"{name} cannot be installed here: {exc}")
    return runtimes.get_runtime(name)


def _check(log: Path, store_root: Path, session_file: Path, tmp_path: Path) -> list[dict]:
    """At most 2 checkpoints, each restorable to its logged digest, the log matching the store
    and naming every boundary of the session once."""
    recs = read_decisions(log)
    cps = [r for r in recs if r["decision"] == CP]
    assert 1 <= len(cps) <= 2
    store = CheckpointStore(store_root)
    assert sorted(r["checkpoint_id"] for r in cps) == store.ids()
    for r in cps:
        dest = tmp_path / f"restored-{r['boundary']}"
        info = store.restore(r["checkpoint_id"], dest)
        assert info.state_digest == r["state_digest"] == state_digest(dest)
        assert info.facts["advisor"]["boundary"] == r["boundary"]
    assert [r["remaining_budget"] for r in cps] == [1.0, 0.0][:len(cps)]
    traj = read_trajectory(session_file)
    bounds = [r["boundary"] for r in recs if r["boundary"] is not None]
    assert sorted(bounds) == bounds and len(set(bounds)) == len(bounds)
    assert len(bounds) <= len(traj.boundaries("tool_call"))
    assert {r["session"] for r in recs} == {traj.task_id}
    return recs


@pytest.fixture()
def stops_servers(tmp_path: Path):
    """Shut down the advisor server a test started (its state under ``tmp_path``)."""
    yield
    from ripplecp_policy.hook_client import request

    for state in (tmp_path / "state",):
        try:
            request(state, "POST", "/v1/shutdown", timeout=5)
        except OSError:
            pass


def _install(runtime: str, model: Path, state: Path, store: Path, env: dict) -> None:
    p = subprocess.run([sys.executable, "-m", MODULE, "install", "--runtime", runtime, "--scope",
                        "user", "--model", str(model), "--budget", "count:2", "--store", str(store),
                        "--state", str(state)], env={**env, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    client = REPO / "ripplecp_policy" / "hook_client.py"
    p = subprocess.run([sys.executable, "-I", "-S", str(client), "--state", str(state), "--start",
                        "--wait-s", "120"], capture_output=True, text=True, timeout=200)
    assert p.returncode == 0


@pytest.mark.slow
def test_claude_code_under_the_advisor_hook(model: Path, tmp_path: Path, stops_servers) -> None:
    """The hooks `advise install` writes (http hooks to the server) in a real Claude Code
    session; `advise uninstall` puts the settings back as they were."""
    rt = _ready("claude-code")
    ws = tmp_path / "ws"
    ws.mkdir()
    state, store = tmp_path / "state", tmp_path / "store"
    with ModelServer(ScriptedBrain(FIVE_FILES)) as srv:
        launch = rt.launch("make five files", home=tmp_path / "home", cwd=ws, base_url=srv.url)
        settings_file = Path(launch.env["CLAUDE_CONFIG_DIR"]) / "settings.json"
        before = settings_file.read_text()
        _install("claude-code", model, state, store,
                 {**os.environ, "CLAUDE_CONFIG_DIR": launch.env["CLAUDE_CONFIG_DIR"]})
        assert '"type": "http"' in settings_file.read_text()
        p = subprocess.run(launch.argv, env=dict(launch.env), cwd=ws, text=True,
                           capture_output=True, stdin=subprocess.DEVNULL, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    assert sorted(f.name for f in ws.iterdir()) == [f"{n}.txt" for n in
                                                    sorted(("one", "two", "three", "four", "five"))]
    session = rt.sessions(tmp_path / "home")[-1]
    recs = _check(state / "sessions" / f"{session.stem}.jsonl", store, session, tmp_path)
    assert len([r for r in recs if r["decision"] == CP]) == 2
    p = subprocess.run([sys.executable, "-m", MODULE, "uninstall", "--state", str(state)],
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and json.loads(settings_file.read_text()) == json.loads(before)


@pytest.mark.slow
def test_codex_under_the_advisor_hooks(model: Path, tmp_path: Path, stops_servers) -> None:
    """The Codex command hooks `advise install` writes, in a real `codex exec` (hooks it has
    not been asked to trust yet run with --dangerously-bypass-hook-trust)."""
    rt = _ready("codex")
    ws = tmp_path / "ws"
    ws.mkdir()
    state, store = tmp_path / "state", tmp_path / "store"
    with ModelServer(ScriptedBrain(FIVE_FILES)) as srv:
        launch = rt.launch("make five files", home=tmp_path / "home", cwd=ws, base_url=srv.url,
                           extra=["--dangerously-bypass-hook-trust"])
        _install("codex", model, state, store, {**os.environ, "CODEX_HOME": launch.env["CODEX_HOME"]})
        p = subprocess.run(launch.argv, env=dict(launch.env), cwd=ws, text=True,
                           capture_output=True, stdin=subprocess.DEVNULL, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    rollout = rt.sessions(tmp_path / "home")[-1]
    session = rt.thread_id(rollout)
    recs = _check(state / "sessions" / f"{session}.jsonl", store, rollout, tmp_path)
    assert [r["decision"] for r in recs] == [CP, CP, "SKIP", "SKIP", "SKIP"]


@pytest.mark.slow
def test_codex_exec_run_by_the_advisor(model: Path, tmp_path: Path, stops_servers) -> None:
    rt = _ready("codex")
    ws = tmp_path / "ws"
    ws.mkdir()
    log, store = tmp_path / "decisions.jsonl", tmp_path / "store"
    with ModelServer(ScriptedBrain(FIVE_FILES)) as srv:
        launch = rt.launch("make five files", home=tmp_path / "home", cwd=ws, base_url=srv.url)
        p = subprocess.run(
            [sys.executable, "-m", MODULE, "--model", str(model), "--budget", "count:2",
             "--store", str(store), "--log", str(log), "--state", str(tmp_path / "state"),
             "--wait", "120", "--", *launch.argv],  # every boundary followed: wait for the server
            env={**launch.env, "PYTHONPATH": str(REPO)}, cwd=ws, text=True, capture_output=True,
            stdin=subprocess.DEVNULL, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    lines = [json.loads(x) for x in p.stdout.splitlines()]  # the command's own output, copied
    assert lines[0]["type"] == "thread.started" and lines[-1]["type"] == "turn.completed"
    stream = tmp_path / "stream.jsonl"
    stream.write_text(p.stdout)
    recs = _check(log, store, stream, tmp_path)
    assert len(recs) == 5 and [r["decision"] for r in recs] == [CP, CP, "SKIP", "SKIP", "SKIP"]
