"""Agent runtimes: pinned installs, offline configurations, and the real programs driven by
the loopback model server (Codex CLI, Claude Code, mini-swe-agent), killed and resumed, with
no connection leaving loopback.

Tests that need a runtime install it (idempotent, into ``.runtimes/``) and skip, saying why,
only where it cannot be installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from oracle.agents import runtimes
from oracle.agents.model_server import (
    Conversation,
    ModelServer,
    Plan,
    ProxyBrain,
    ScriptedBrain,
    ServerConfig,
    Step,
)
from oracle.agents.runtimes import (
    ClaudeCode,
    Codex,
    Launch,
    MiniSweAgent,
    RuntimeInstallError,
    toml_text,
)
from oracle.processes import fail_stop_prefix
from oracle.store.audit import AuditLog
from tests.oracle.conftest import ready_runtime

THREE_STEPS = Plan.from_json([
    {"shell": "printf 'hello\\n' > hello.txt"},
    {"edit": {"path": "hello.txt", "old": "hello", "new": "hello world"}},
    {"finish": "done"},
])
URL = "http://127.0.0.1:5555"


# ----------------------------------------------------------------------------- configuration


def test_toml_text_round_trips() -> None:
    cfg = {"a": 1, "b": "x \"q\" \\ \n", "c": [1, "two"], "d": True, "t": {"e": 2.5,
           "my.key": {"f": False}}, "empty": {}}
    assert tomllib.loads(toml_text(cfg)) == cfg
    with pytest.raises(TypeError, match="cannot write"):
        toml_text({"x": object()})


def _strings(obj: object) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


def test_codex_home_disables_every_network_feature(tmp_path: Path) -> None:
    Codex().prepare_home(tmp_path, URL, "slug-x")
    cfg = tomllib.loads((tmp_path / "config.toml").read_text())
    provider = cfg["model_providers"][cfg["model_provider"]]
    assert provider == {**provider, "base_url": f"{URL}/v1", "wire_api": "responses",
                        "supports_websockets": False, "request_max_retries": 0,
                        "stream_max_retries": 0}
    assert cfg["model"] == "slug-x" and cfg["approval_policy"] == "never"
    assert cfg["check_for_update_on_startup"] is False and cfg["web_search"] == "disabled"
    assert cfg["analytics"] == cfg["feedback"] == cfg["agents"] == {"enabled": False}
    for feature in ("plugins", "apps", "remote_plugin", "memories", "image_generation",
                    "tool_suggest", "goals", "shell_snapshot", "browser_use", "computer_use",
                    "in_app_updates", "api_key_model_discovery", "unbounded_connection_retries"):
        assert cfg["features"][feature] is False, feature
    assert set(cfg["features"].values()) == {False}
    urls = [s for s in _strings(cfg) if "://" in s]
    assert urls and all(u.startswith("http://127.0.0.1:") for u in urls)
    catalog = json.loads(Path(cfg["model_catalog_json"]).read_text())
    entry = catalog["models"][0]
    assert entry["slug"] == "slug-x" and entry["apply_patch_tool_type"] == "freeform"


def test_codex_launch_env_is_built_from_scratch(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    launch = Codex().launch("go", home=tmp_path / "h", cwd=tmp_path, base_url=URL)
    assert "OPENAI_API_KEY" not in launch.env and "HTTPS_PROXY" not in launch.env
    assert launch.env["CODEX_HOME"] == str((tmp_path / "h").resolve())
    assert launch.env["HOME"] == launch.env["CODEX_HOME"]
    assert launch.env[Codex.key_env] == runtimes.DUMMY_KEY
    assert launch.argv[1:5] == ("exec", "--json", "--skip-git-repo-check", "--strict-config")
    assert launch.argv[-1] == "go"
    resumed = Codex().argv("more", home=tmp_path, resume="tid")
    forked = Codex().argv("more", home=tmp_path, resume="tid", fork=True)
    assert resumed[-3:] == ["resume", "tid", "more"] and forked[-3:] == ["fork", "tid", "more"]


def test_claude_env_switches_off_nonessential_traffic(tmp_path: Path) -> None:
    rt = ClaudeCode()
    launch = rt.launch("go", home=tmp_path / "h", cwd=tmp_path, base_url=URL + "/")
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == URL and env["ANTHROPIC_API_KEY"] == runtimes.DUMMY_KEY
    for switch in ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY",
                   "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER"):
        assert env[switch] == "1", switch
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert env.get("IS_SANDBOX") == ("1" if os.geteuid() == 0 else None)
    assert env["CLAUDE_CONFIG_DIR"].startswith(env["HOME"])
    settings = json.loads((Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json").read_text())
    assert set(settings["permissions"]["deny"]) == {"WebFetch", "WebSearch"}
    assert settings["autoUpdates"] is False
    argv = list(launch.argv)
    assert argv[1:6] == ["-p", "--output-format", "stream-json", "--verbose",
                         "--dangerously-skip-permissions"]
    assert rt.argv("p", home=tmp_path, resume="sid", fork=True)[-4:] == [
        "--resume", "sid", "--fork-session", "p"]


def test_mini_swe_agent_env_and_argv(tmp_path: Path) -> None:
    rt = MiniSweAgent()
    launch = rt.launch("task", home=tmp_path / "h", cwd=tmp_path, base_url=URL)
    env = launch.env
    assert env["MSWEA_CONFIGURED"] == "true" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] == "1"
    assert env["MSWEA_COST_TRACKING"] == "ignore_errors"
    assert env["MSWEA_GLOBAL_CONFIG_DIR"].startswith(env["HOME"])
    assert f"model.model_kwargs.api_base={URL}/v1" in launch.argv
    assert launch.argv[-2:] == ("-t", "task")
    # no resume of its own: the resume entry point, with its own interpreter, the same options
    resumed = rt.argv("x", home=tmp_path, resume="trajectory.json", base_url=URL)
    assert resumed[:3] == [str(rt.python()), str(rt.resume_script),
                           str(tmp_path / "resume" / "trajectory.json")]
    assert resumed[3:] == rt.argv("x", home=tmp_path, base_url=URL)[1:]
    assert rt.resume_script.is_file()
    with pytest.raises(ValueError, match="name a file of home/resume/"):
        rt.argv("x", home=tmp_path, resume="../elsewhere.json")


def test_seed_home_puts_session_files_where_resume_finds_them(tmp_path: Path) -> None:
    tid = "01a23335-8428-7a61-8f75-5df588f142c8"
    rollout = tmp_path / "old" / "sessions" / "2026" / "12" / "01" / f"rollout-2026-12-01T20-04-34-{tid}.jsonl"
    rollout.parent.mkdir(parents=True)
    rollout.write_text("{}\n")
    dest = Codex().seed_home(tmp_path / "new", rollout, tmp_path)
    assert dest == tmp_path / "new" / "sessions" / "2026" / "12" / "01" / rollout.name
    assert Codex().sessions(tmp_path / "new") == [dest] and Codex.thread_id(dest) == tid
    with pytest.raises(ValueError, match="not a Codex rollout"):
        Codex.thread_id(tmp_path / "x.jsonl")
    session = tmp_path / "s.jsonl"
    session.write_text("{}\n")
    cwd = tmp_path / "my_ws.1"
    dest = ClaudeCode().seed_home(tmp_path / "c", session, cwd)
    slug = ClaudeCode.project_slug(cwd)
    assert re.fullmatch(r"[A-Za-z0-9-]+", slug) and slug.endswith("-my-ws-1")
    assert dest == tmp_path / "c" / ".claude" / "projects" / slug / "s.jsonl"
    assert ClaudeCode().sessions(tmp_path / "c") == [dest]
    dest = MiniSweAgent().seed_home(tmp_path / "m", session, cwd)
    assert dest == tmp_path / "m" / "resume" / "s.jsonl" and dest.read_text() == "{}\n"


def test_install_without_npm_is_one_clear_line(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeInstallError, match="npm is not on PATH") as err:
        runtimes.install("codex", tmp_path / "rt")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="unknown runtime 'codx'"):
        runtimes.install("codx", tmp_path / "rt")


def test_installed_lists_every_runtime(tmp_path: Path) -> None:
    found = runtimes.installed(tmp_path)
    assert [i.name for i in found] == ["codex", "claude-code", "mini-swe-agent"]
    assert all(not i.usable and i.detail == "not installed" for i in found)
    assert [i.pinned for i in found] == [r.spec.version for r in runtimes.RUNTIMES.values()]


def test_runtimes_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("RIPPLECP_RUNTIMES", str(tmp_path))
    assert runtimes.runtimes_root() == tmp_path.resolve()
    monkeypatch.delenv("RIPPLECP_RUNTIMES")
    assert runtimes.runtimes_root().name == ".runtimes"


def _alive(token: str) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token in cmdline.read_bytes().decode(errors="replace").split("\0"):
                return True
        except OSError:
            continue
    return False


def test_fail_stop_kills_tools_started_in_their_own_session(tmp_path: Path) -> None:
    if not fail_stop_prefix():
        pytest.skip("unshare --pid is not available or not permitted here")
    token = "61.2345"
    launch = Launch(("bash", "-c", f"setsid sleep {token} & touch started; wait"),
                    {"PATH": os.environ["PATH"]}, tmp_path)
    proc = launch.start()
    _wait_for(lambda: (tmp_path / "started").exists() and _alive(token), 10)
    proc.kill()
    proc.communicate()
    _wait_for(lambda: not _alive(token), 5)


def _wait_for(cond: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)


# ----------------------------------------------------------------------------- real programs

def _ready(name: str) -> runtimes.Runtime:
    """The runtime, installed (once per session), or skip saying why it cannot be."""
    return ready_runtime(name)


class _Recording(ScriptedBrain):
    """A scripted brain that keeps every transcript it was asked about."""

    def __init__(self, plan: Plan) -> None:
        super().__init__(plan)
        self.seen: list[Conversation] = []

    def next_step(self, conversation: Conversation) -> Step:
        self.seen.append(conversation)
        return super().next_step(conversation)


def _run(launch: Launch, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(launch.argv, env=dict(launch.env), cwd=launch.cwd, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)


def _run_task(rt: runtimes.Runtime, tmp_path: Path, base_url: str,
              wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run the three-step task in ``tmp_path/ws`` (``wrap`` prefixes argv); it must succeed."""
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    launch = rt.launch("make hello.txt", home=tmp_path / "home", cwd=ws, base_url=base_url)
    p = _run(Launch((*wrap, *launch.argv), launch.env, launch.cwd), timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-2000:]
    assert (ws / "hello.txt").read_text() == "hello world\n"
    return p


def _check_audit(audit: Path, served: int) -> list[dict]:
    records = AuditLog(audit).records()
    model = [r for r in records if r.get("protocol")]
    assert len(model) == served >= 3
    for r in model:
        assert r["status"] == 200 and "error" not in r
        assert all(len(r[k]) == 64 for k in ("request_sha256", "response_sha256",
                                             "transcript_sha256"))
    assert [r["decision"] for r in model[:3]] == ["turn0/step0", "turn0/step1", "turn0/step2"]
    return model


@pytest.mark.slow
def test_codex_exec_runs_a_scripted_task(tmp_path: Path) -> None:
    rt = _ready("codex")
    with ModelServer(ScriptedBrain(THREE_STEPS), ServerConfig(audit=tmp_path / "a.jsonl")) as srv:
        p = _run_task(rt, tmp_path, srv.url)
    events = [json.loads(line) for line in p.stdout.splitlines()]
    items = [e["item"]["type"] for e in events if e["type"] == "item.completed"]
    assert items == ["command_execution", "file_change", "agent_message"]
    assert events[-1]["type"] == "turn.completed" and events[-1]["usage"]["output_tokens"] > 0
    model = _check_audit(tmp_path / "a.jsonl", srv.requests_served)
    assert {r["conversation"] for r in model} == {events[0]["thread_id"]}
    assert len(rt.sessions(tmp_path / "home")) == 1


@pytest.mark.slow
def test_codex_through_the_proxy_brain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = _ready("codex")
    monkeypatch.setenv("RIPPLECP_TEST_UPSTREAM_KEY", "sk-upstream-secret")
    with ModelServer(ScriptedBrain(THREE_STEPS), ServerConfig(audit=tmp_path / "up.jsonl")) as up, \
            ModelServer(ProxyBrain(up.url, key_env="RIPPLECP_TEST_UPSTREAM_KEY"),
                        ServerConfig(audit=tmp_path / "proxy.jsonl")) as proxy:
        _run_task(rt, tmp_path, proxy.url)
    up_recs, proxy_recs = (AuditLog(tmp_path / n).records() for n in ("up.jsonl", "proxy.jsonl"))
    assert len(proxy_recs) == len(up_recs) == 3
    for a, b in zip(proxy_recs, up_recs, strict=True):
        assert (a["request_sha256"], a["response_sha256"], a["transcript_sha256"]) == \
            (b["request_sha256"], b["response_sha256"], b["transcript_sha256"])
    assert "sk-upstream-secret" not in (tmp_path / "proxy.jsonl").read_text()


@pytest.mark.slow
def test_claude_code_runs_a_scripted_task(tmp_path: Path) -> None:
    rt = _ready("claude-code")
    with ModelServer(ScriptedBrain(THREE_STEPS), ServerConfig(audit=tmp_path / "a.jsonl")) as srv:
        p = _run_task(rt, tmp_path, srv.url)
    events = [json.loads(line) for line in p.stdout.splitlines()]
    assert events[0]["type"] == "system" and events[0]["subtype"] == "init"
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["result"] == "done"
    tools = [b["name"] for e in events if e["type"] == "assistant"
             for b in e["message"]["content"] if b["type"] == "tool_use"]
    assert tools == ["Bash", "Read", "Edit"]  # the edit reads the file first, in one turn
    model = _check_audit(tmp_path / "a.jsonl", srv.requests_served)
    assert {r["conversation"] for r in model} == {events[0]["session_id"]}
    assert [r["method"] for r in AuditLog(tmp_path / "a.jsonl").records()][0] == "HEAD"
    assert [p.stem for p in rt.sessions(tmp_path / "home")] == [events[0]["session_id"]]


@pytest.mark.slow
def test_mini_swe_agent_runs_a_scripted_task(tmp_path: Path) -> None:
    rt = _ready("mini-swe-agent")
    with ModelServer(ScriptedBrain(THREE_STEPS), ServerConfig(audit=tmp_path / "a.jsonl")) as srv:
        _run_task(rt, tmp_path, srv.url)
    model = _check_audit(tmp_path / "a.jsonl", srv.requests_served)
    assert {r["protocol"] for r in model} == {"openai-chat"}
    traj = json.loads(rt.sessions(tmp_path / "home")[0].read_text())
    assert traj["info"]["exit_status"] == "Submitted"


def _first_result_saved(rt: object, home: Path) -> bool:
    """The runtime's saved session holds the output of the first tool call (hello.txt)."""
    files = rt.sessions(home)  # type: ignore[attr-defined]
    return bool(files) and any(
        "tool_result" in line or "function_call_output" in line
        for line in files[-1].read_text(errors="replace").splitlines())


RESUMABLE = Plan.from_json({"turns": [
    {"steps": [{"shell": "printf 'hello\\n' > hello.txt"},
               {"shell": "touch started && sleep 47.31"}, {"finish": "slept"}]},
    {"match": "RESUME", "steps": [{"edit": {"path": "hello.txt", "old": "hello",
                                            "new": "hello again"}}, {"finish": "resumed"}]},
]})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["codex", "claude-code"])
def test_killed_mid_tool_then_resumed_in_a_fresh_home(name: str, tmp_path: Path) -> None:
    rt = _ready(name)
    if not fail_stop_prefix():
        pytest.skip("unshare --pid is not available: a kill would leave the tool running")
    ws = tmp_path / "ws"
    ws.mkdir()
    brain = _Recording(RESUMABLE)
    with ModelServer(brain, ServerConfig(audit=tmp_path / "a.jsonl")) as srv:
        proc = rt.launch("make hello.txt", home=tmp_path / "home1", cwd=ws,
                         base_url=srv.url).start()
        try:
            # Claude Code appends to its session file lazily (seen lagging by over a second
            # under load): kill only once the first tool's result is on disk, so the resumed
            # transcript can hold it. Codex writes its rollout before running a tool.
            _wait_for(lambda: (ws / "started").exists() and _alive("47.31")
                      and _first_result_saved(rt, tmp_path / "home1"), 60)
        finally:
            proc.kill()
            proc.communicate()
        _wait_for(lambda: not _alive("47.31"), 5)  # the sleep died with the runtime
        session = rt.sessions(tmp_path / "home1")[-1]
        sid = Codex.thread_id(session) if name == "codex" else session.stem
        rt.seed_home(tmp_path / "home2", session, ws)
        before = len(brain.seen)
        p = _run(rt.launch("RESUME: finish the task", home=tmp_path / "home2", cwd=ws,
                           base_url=srv.url, resume=sid))
    assert p.returncode == 0, p.stderr[-2000:]
    assert (ws / "hello.txt").read_text() == "hello again\n"
    resumed = brain.seen[before]
    assert resumed.id == sid  # same thread/session
    prompts = [t for _, t in resumed.prompts()]
    assert any("make hello.txt" in t for t in prompts) and "RESUME" in prompts[-1]
    first = resumed.tool_calls()[0]
    assert first.kind == "shell" and first.command == "printf 'hello\\n' > hello.txt"
    assert first.id in resumed.results()  # the earlier call arrives with its result
    if name == "codex":  # the interrupted call is closed with a synthetic "aborted"
        sleep = [c for c in resumed.tool_calls() if c.command and "sleep" in c.command]
        assert sleep and resumed.results()[sleep[0].id].output == "aborted"
    assert brain.next_step(resumed).label == "turn1/step0"


#: why the loopback checks skip where strace is absent (CI images may lack it)
NO_STRACE = ("strace is not on PATH, so the runtime's connections cannot be traced and the "
             "loopback-only check is not made (apt-get install -y strace)")


def _connects(trace: Path) -> list[str]:
    """Every connect/sendto that reaches an address other than loopback (or DNS at all)."""
    bad = []
    for line in trace.read_text().splitlines():
        if "sa_family=AF_INET" not in line:
            continue  # AF_UNIX, AF_NETLINK, or no address
        addr = re.search(r'inet_(?:addr|pton)\((?:AF_INET6, )?"([^"]+)"', line)
        port = re.search(r"htons\((\d+)\)", line)
        host = addr.group(1) if addr else "?"
        loop = host.startswith("127.") or host in ("::1", "::ffff:127.0.0.1")
        if not loop or (port and port.group(1) == "53"):
            bad.append(line)
    return bad


@pytest.mark.slow
@pytest.mark.parametrize("name", ["codex", "claude-code", "mini-swe-agent"])
def test_nothing_leaves_loopback_under_strace(name: str, tmp_path: Path) -> None:
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip(NO_STRACE)
    rt = _ready(name)
    trace = tmp_path / "trace.txt"
    with ModelServer(ScriptedBrain(THREE_STEPS)) as srv:
        _run_task(rt, tmp_path, srv.url, wrap=(strace, "-f", "-qq", "-e",
                                               "trace=connect,sendto,sendmsg", "-o", str(trace)))
    text = trace.read_text()
    assert f"htons({srv.port})" in text  # the trace did see the model connection
    assert _connects(trace) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["codex", "claude-code"])
def test_nothing_leaves_loopback_in_a_harness_branch(name: str, tmp_path: Path) -> None:
    """A nominal run and a branch (drive killed in its failure segment, recovery resumed from a
    checkpoint) of the real runtime under the harness, every launch traced: every connection
    goes to the run's loopback model server, no DNS."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip(NO_STRACE)
    _ready(name)
    from oracle.agents import get_agent
    from oracle.harness.branch import BranchSpec, HarnessConfig, StudyContext, run_branch
    from oracle.harness.study import run_nominal_job

    wrap = [strace, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg",
            "-o", str(tmp_path / "trace-{run}")]
    options = {"wrap": wrap}
    (task,) = get_agent(name).make_tasks(
        1, 0, tmp_path / "tasks", n_repos=1, families={"numeric": ("colorsys",)},
        passing_sample=1, failing_sample=1, top_lines=1, max_edits=2)
    ctx = StudyContext(name, options, {task.task_id: task}, HarnessConfig(granularity="tool_call"),
                       tmp_path / "study", "strace")
    nom = run_nominal_job(task.task_id, ctx, seed=0)
    assert nom["n_boundaries"] >= 3
    ctx.nominal[task.task_id] = nom
    rec = run_branch(BranchSpec("b", task.task_id, "table", 1, 3, 2, 1, 5, cell_id="c"), ctx)
    assert rec["drive_struck"] and not rec["quarantined"], rec["quarantine_reason"]
    traces = sorted(tmp_path.glob("trace-*"))
    assert len(traces) == 3  # the nominal run, the drive, the recovery
    for trace in traces:
        text = trace.read_text()
        assert re.search(r'inet_addr\("127\.0\.0\.1"\)', text)  # it did talk to its server
        assert _connects(trace) == [], trace.name


def test_a_runtime_is_one_record_every_list_reads() -> None:
    """The registry, ``python -m oracle``'s choices and the collection study read the records;
    each record's rules, readers and install spec resolve."""
    from experiments.collect_labels import RUNTIMES as COLLECT_RUNTIMES
    from features.readers import FORMATS
    from oracle.__main__ import RUNTIME_NAMES
    from oracle.agents import agent_names, get_agent
    from oracle.agents.runtime import StreamRules, stream_rules

    assert RUNTIME_NAMES == tuple(runtimes.RUNTIMES)
    assert set(COLLECT_RUNTIMES) == {n for n, r in runtimes.RUNTIMES.items() if r.drives_brains}
    assert {"codex", "claude-code"} <= set(COLLECT_RUNTIMES)
    for name, rt in runtimes.RUNTIMES.items():
        assert rt.spec.name == name and name in agent_names()
        assert isinstance(stream_rules(rt), StreamRules)
        assert rt.stream_format in FORMATS and rt.session_format in FORMATS
        agent = get_agent(name, granularity="tool_call")
        assert agent.name == name and agent.rules is stream_rules(rt)
