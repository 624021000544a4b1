"""Write and remove the advisor's hooks in a runtime's configuration (``advise install`` /
``advise uninstall``), idempotently and exactly.

- Claude Code: ``.claude/settings.local.json`` of the project (``--scope project``: the
  settings Claude Code keeps out of version control, since the hooks name this machine's
  paths and the server's token) or ``settings.json`` of the user's configuration folder
  (``--scope user``: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``). ``PostToolUse``, ``Stop``
  and ``SessionEnd`` are ``http`` hooks to the server on 127.0.0.1 (no process per call);
  ``SessionStart`` is the standard-library command client with ``--start``, which starts the
  server when none runs.
- Codex: ``.codex/hooks.json`` of the project or ``hooks.json`` of ``$CODEX_HOME`` (else
  ``~/.codex``); every hook is the command client (Codex hooks are commands).

What was written is recorded in the state folder (``installed.json``: file, event, the hook
group, whether the file was created), so ``uninstall`` removes exactly that — a group equal
to the recorded one — and deletes a file only if it created it and left it empty. Installing
twice writes nothing the second time. A configuration file that is not a JSON object is
refused in one line, nothing written.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Literal

from ripplecp_policy.advisor_state import token_of

__all__ = ["RUNTIMES", "SCOPES", "config_file", "hook_groups", "install", "installed", "missing",
           "uninstall"]

RUNTIMES = ("claude-code", "codex")
SCOPES = ("project", "user")
Runtime = Literal["claude-code", "codex"]
Scope = Literal["project", "user"]
CLIENT = Path(__file__).with_name("hook_client.py")
#: seconds a runtime waits for a hook (a checkpoint is taken before the answer)
HOOK_TIMEOUT_S = 60


def config_file(runtime: str, scope: str, project: Path, env: dict[str, str] | None = None) -> Path:
    """The runtime's configuration file that holds the hooks for ``scope``."""
    env = dict(os.environ if env is None else env)
    home = Path(env.get("HOME") or Path.home())
    if runtime == "claude-code":
        if scope == "project":
            return Path(project) / ".claude" / "settings.local.json"
        return Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude") / "settings.json"
    if runtime == "codex":
        if scope == "project":
            return Path(project) / ".codex" / "hooks.json"
        return Path(env.get("CODEX_HOME") or home / ".codex") / "hooks.json"
    raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")


def client_command(state: Path, runtime: str, *, start: bool = False, query: str = "",
                   python: str | None = None) -> str:
    """The shell command of the standard-library client (isolated, no site: a bare start)."""
    words = [python or sys.executable, "-I", "-S", str(CLIENT), "--state", str(state)]
    words += ["--start"] if start else ["--runtime", runtime]
    if query:
        words += ["--query", query]
    return " ".join(shlex.quote(w) for w in words)


def hook_groups(runtime: str, state: Path, *, port: int | None, query: str = "",
                python: str | None = None) -> dict[str, dict[str, Any]]:
    """The hook group to add under each event for ``runtime``."""
    start = {"hooks": [{"type": "command", "command": client_command(state, runtime, start=True,
                                                                      python=python),
                        "timeout": 10}]}
    if runtime == "claude-code":
        if port is None:
            raise ValueError("a Claude Code http hook needs the server's port")
        url = f"http://127.0.0.1:{port}/v1/hook/claude-code" + (f"?{query}" if query else "")
        http = {"type": "http", "url": url, "headers": {"X-Ripplecp-Token": token_of(state)},
                "timeout": HOOK_TIMEOUT_S}
        return {"SessionStart": start, "PostToolUse": {"matcher": "*", "hooks": [http]},
                "Stop": {"hooks": [http]}, "SessionEnd": {"hooks": [http]}}
    cmd = {"hooks": [{"type": "command", "command": client_command(state, runtime, query=query,
                                                                   python=python),
                      "timeout": HOOK_TIMEOUT_S}]}
    return {"SessionStart": start, "PostToolUse": cmd, "Stop": cmd}


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text()) if path.exists() else {}
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc}); nothing written") from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise ValueError(f"{path}: not a settings object with a 'hooks' object; nothing written")
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def installed(state: Path) -> list[dict[str, Any]]:
    """The entries ``install`` recorded in ``state``."""
    path = Path(state) / "installed.json"
    if not path.exists():
        return []
    return list(json.loads(path.read_text()).get("entries", []))


def _record(state: Path, entries: list[dict[str, Any]]) -> None:
    path = Path(state) / "installed.json"
    if not entries:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".installed.json.{os.getpid()}")
    tmp.write_text(json.dumps({"entries": entries}, indent=1) + "\n")
    os.replace(tmp, path)


def install(runtime: str, scope: str, state: Path, project: Path, *, port: int | None,
            query: str = "", python: str | None = None,
            env: dict[str, str] | None = None) -> list[str]:
    """Add the advisor's hooks for ``runtime`` at ``scope``; the events added (none when
    they were all there already)."""
    path = config_file(runtime, scope, project, env)
    data = _load(path)
    groups = hook_groups(runtime, state, port=port, query=query, python=python)
    created = not path.exists()
    hooks = data.setdefault("hooks", {})
    added = []
    for event, group in groups.items():
        have = hooks.setdefault(event, [])
        if not isinstance(have, list):
            raise ValueError(f"{path}: hooks.{event} is not a list; nothing written")
        if group not in have:
            have.append(group)
            added.append(event)
    if not added:
        return []
    records = [e for e in installed(state)]
    records += [{"runtime": runtime, "scope": scope, "file": str(path), "event": ev,
                 "group": groups[ev], "created_file": created} for ev in added]
    _save(path, data)
    _record(state, records)
    return added


def uninstall(state: Path, runtime: str | None = None) -> list[str]:
    """Remove exactly the hooks ``install`` recorded in ``state`` (of ``runtime`` when
    given); the ``file: event`` pairs removed."""
    records = installed(state)
    keep, removed = [], []
    by_file: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        (by_file.setdefault(rec["file"], []) if runtime in (None, rec["runtime"]) else keep).append(rec)
    for file, recs in by_file.items():
        path = Path(file)
        if not path.exists():
            continue
        data = _load(path)
        hooks = data.get("hooks", {})
        for rec in recs:
            groups = hooks.get(rec["event"], [])
            if rec["group"] in groups:
                groups.remove(rec["group"])
                removed.append(f"{file}: {rec['event']}")
            if not groups:
                hooks.pop(rec["event"], None)
        if not hooks:
            data.pop("hooks", None)
        if not data and all(r["created_file"] for r in recs):
            path.unlink()
        else:
            _save(path, data)
    _record(state, keep)
    return removed


def missing(state: Path, runtime: str | None = None) -> list[str]:
    """Recorded hooks no longer in their file (``file: event``), and a line for a runtime
    with nothing recorded at all."""
    records = [r for r in installed(state) if runtime in (None, r["runtime"])]
    if not records:
        return [f"no {runtime or 'advisor'} hooks installed for {state}"]
    out = []
    for rec in records:
        try:
            groups = _load(Path(rec["file"])).get("hooks", {}).get(rec["event"], [])
        except ValueError:
            groups = []
        if rec["group"] not in groups:
            out.append(f"{rec['file']}: {rec['event']}")
    return out
