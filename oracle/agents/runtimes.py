"""Real agent runtimes: pinned installs into a project-local folder, and their offline setup.

Codex CLI and Claude Code come from npm into one prefix, mini-swe-agent from PyPI into its
own virtual environment, all under ``.runtimes/`` at the repository root (git-ignored; the
environment variable ``RIPPLECP_RUNTIMES`` names another folder). :func:`install` is
idempotent; :func:`installed` lists what is there and usable, each version probed by running
the program. Claude Code is proprietary: it is installed at run time, never vendored.

Each runtime's *offline configuration* (:class:`Runtime`) points it at a loopback model server
(:mod:`oracle.agents.model_server`) with every network feature off, in a private home per run:

* Codex: ``CODEX_HOME`` with a ``config.toml`` defining a loopback provider (``wire_api =
  "responses"``, no websockets, retries 0), plugins / apps / memories / analytics / feedback
  / web search / update check and the other network features off, and a model catalog entry
  for the model slug (without one Codex drops the ``apply_patch`` tool).
* Claude Code: private ``HOME`` and ``CLAUDE_CONFIG_DIR``, ``ANTHROPIC_BASE_URL``, a dummy
  key, the nonessential-traffic / telemetry / error-reporting / autoupdater switches,
  ``CLAUDE_CODE_MAX_RETRIES=0``, ``IS_SANDBOX=1`` when root, and the web tools denied.
* mini-swe-agent: litellm pointed at ``/v1``, its configured / cost / retry switches and
  litellm's local price table (else importing litellm downloads one); resumed through
  :mod:`oracle.agents.mini_resume` (it has no resume of its own).

The native binaries inside the npm packages are called directly (saves the node wrapper's
start-up). The environment of a launch is built from scratch (``PATH`` and the locale only),
so no key, proxy or home of the caller leaks in.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from oracle.processes import popen

__all__ = [
    "RUNTIMES",
    "ClaudeCode",
    "Codex",
    "Installed",
    "Launch",
    "MiniSweAgent",
    "Runtime",
    "RuntimeInstallError",
    "RuntimeSpec",
    "get_runtime",
    "install",
    "installed",
    "runtime_names",
    "runtimes_root",
    "toml_text",
]

#: the key value runtimes are given; the loopback server ignores it
DUMMY_KEY = "ripplecp-loopback"
#: the model slug runtimes ask the loopback server for
DEFAULT_MODEL = "loopback"


class RuntimeInstallError(OSError):
    """A runtime could not be installed or found; the message is one line saying why (an
    ``OSError``: the machine lacks something, so commands report it as an input error)."""


@dataclass(frozen=True)
class RuntimeSpec:
    """A pinned runtime: where it comes from and what the version probe must print."""

    name: str
    registry: Literal["npm", "pypi"]
    package: str
    version: str
    licence: str


@dataclass(frozen=True)
class Installed:
    """One runtime as found on disk: ``usable`` when its probe ran and printed the pin."""

    name: str
    pinned: str
    version: str | None
    executable: Path | None
    usable: bool
    detail: str = ""


@dataclass(frozen=True)
class Launch:
    """How to start one run: argv, the complete environment, and the working directory."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path

    def start(self, *, fail_stop: bool = True, stdout: Any = subprocess.PIPE,
              stderr: Any = subprocess.PIPE) -> subprocess.Popen:
        """Start the run (stdin closed, own session) with :func:`oracle.processes.popen`:
        with ``fail_stop`` under the PID-namespace fail-stop, so ``proc.kill()`` also kills
        every tool it started, and in any case dying with the process that started it."""
        return popen(self.argv, env=self.env, cwd=self.cwd, fail_stop=fail_stop,
                     stdout=stdout, stderr=stderr)


def runtimes_root() -> Path:
    """``$RIPPLECP_RUNTIMES``, else ``.runtimes/`` at the repository root."""
    env = os.environ.get("RIPPLECP_RUNTIMES")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[2] / ".runtimes"


def base_env(home: Path) -> dict[str, str]:
    """The environment every launch starts from: PATH, a UTF-8 locale, a private HOME."""
    return {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": str(home),
            "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1"}


# --------------------------------------------------------------------------- TOML


def _toml_value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x, where) for x in v) + "]"
    raise TypeError(f"{where}: cannot write {type(v).__name__} as TOML")


def toml_text(config: Mapping[str, Any]) -> str:
    """TOML for a mapping of scalars, lists and nested tables (what Codex's config needs).

    Written here rather than with a TOML library: the project has no TOML writer among its
    dependencies and the standard library only reads TOML (tests read the output back with
    ``tomllib``).
    """
    lines: list[str] = []

    def table(prefix: str, mapping: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in mapping.items() if not isinstance(v, Mapping)}
        if prefix and (scalars or not mapping):
            lines.append(f"\n[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{_key(k)} = {_toml_value(v, prefix + '.' + k)}")
        for k, v in mapping.items():
            if isinstance(v, Mapping):
                table(f"{prefix}.{_key(k)}" if prefix else _key(k), v)

    table("", config)
    return "\n".join(lines).lstrip("\n") + "\n"


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


# --------------------------------------------------------------------------- runtimes


class Runtime(ABC):
    """A pinned agent runtime: the one record everything else reads about it.

    Its install (``spec``), its offline configuration against a loopback server (the methods
    below), the adapter's stream rules (``rules``: ``"module:attribute"`` of its
    :class:`oracle.agents.runtime.StreamRules`, imported when an agent is built), the readers
    of its live stream and session files (``stream_format``, ``session_format``: names in
    :data:`features.readers.READERS`) and what the command lines offer it (``drives_brains``:
    the LLM-free agents can be brains behind it in ``experiments.collect_labels``). The agent
    registry, ``python -m oracle``'s choices and the collection study all read
    :data:`RUNTIMES`; a new runtime is one subclass here and its stream rules.

    ``base_url`` is always the model server's root (``http://127.0.0.1:PORT``); each runtime
    appends what its protocol needs.
    """

    spec: RuntimeSpec
    #: ``"module:attribute"`` of the adapter's stream rules for this runtime
    rules: str
    #: the reader of the runtime's live stdout (``features.readers``)
    stream_format: str
    #: the reader of the session files it writes (``features.readers``)
    session_format: str
    #: the LLM-free agents can be brains behind it (``experiments.collect_labels --runtime``)
    drives_brains: bool = False
    #: arguments of the version probe (the program prints its version)
    probe_args: tuple[str, ...] = ("--version",)

    @abstractmethod
    def executable(self, root: Path | None = None) -> Path:
        """The program to run (may not exist yet: see :func:`install`)."""

    @abstractmethod
    def prepare_home(self, home: Path, base_url: str, model: str = DEFAULT_MODEL) -> None:
        """Write the runtime's offline configuration into the private ``home``."""

    @abstractmethod
    def env(self, home: Path, base_url: str) -> dict[str, str]:
        """The complete environment of a run in ``home``."""

    @abstractmethod
    def argv(self, prompt: str, *, home: Path, model: str = DEFAULT_MODEL,
             resume: str | None = None, fork: bool = False, base_url: str = "",
             root: Path | None = None, extra: Sequence[str] = ()) -> list[str]:
        """Command line of a headless run; ``resume`` continues (``fork``: copies) a session."""

    def sessions(self, home: Path) -> list[Path]:
        """Session files the runtime wrote under ``home`` (oldest first)."""
        return []

    def seed_home(self, home: Path, session_file: Path, cwd: Path) -> Path:
        """Put a captured session file where a run in a fresh ``home`` resumes it from."""
        raise ValueError(f"{self.spec.name} has no resume of its own")

    def launch(self, prompt: str, *, home: Path, cwd: Path, base_url: str,
               model: str = DEFAULT_MODEL, resume: str | None = None, fork: bool = False,
               root: Path | None = None, extra: Sequence[str] = ()) -> Launch:
        """Prepare ``home`` and return the full launch of one headless run in ``cwd``."""
        home = Path(home).resolve()
        home.mkdir(parents=True, exist_ok=True)
        self.prepare_home(home, base_url, model)
        return Launch(tuple(self.argv(prompt, home=home, model=model, resume=resume, fork=fork,
                                      base_url=base_url, root=root, extra=extra)),
                      self.env(home, base_url), Path(cwd).resolve())

    def probe(self, root: Path | None = None) -> Installed:
        """Run the version probe; usable when it prints the pinned version."""
        exe = self.executable(root)
        if not exe.exists():
            return Installed(self.spec.name, self.spec.version, None, None, False,
                             "not installed")
        try:
            with tempfile.TemporaryDirectory(prefix="ripplecp-probe-") as home:
                p = subprocess.run([str(exe), *self.probe_args], capture_output=True, text=True,
                                   timeout=60, env=self.env(Path(home), "http://127.0.0.1:9"),
                                   stdin=subprocess.DEVNULL, cwd=home)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Installed(self.spec.name, self.spec.version, None, exe, False,
                             f"version probe failed: {exc}")
        m = re.search(r"\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.]*[0-9A-Za-z])?", p.stdout + p.stderr)
        version = m.group(0) if m else None
        ok = p.returncode == 0 and version == self.spec.version
        detail = "" if ok else (f"probe exit {p.returncode}, printed {version!r}, "
                                f"pinned {self.spec.version}")
        return Installed(self.spec.name, self.spec.version, version, exe, ok, detail)


def _npm_native(root: Path, scope_pkg: str, rel: str) -> Path:
    return root / "npm" / "node_modules" / scope_pkg / rel


def _arch() -> tuple[str, str]:
    m = platform.machine().lower()
    return ("arm64", "aarch64") if m in ("aarch64", "arm64") else ("x64", "x86_64")


class Codex(Runtime):
    """Codex CLI (``codex exec --json``) against the loopback Responses API."""

    spec = RuntimeSpec("codex", "npm", "@openai/codex", "0.171.0", "Apache-2.0")
    rules = "oracle.agents.runtime:CODEX_RULES"
    stream_format = "codex-exec"
    session_format = "codex-rollout"
    drives_brains = True
    provider = "ripplecp-loopback"
    key_env = "RIPPLECP_LOOPBACK_KEY"
    #: Codex features that reach the network (or retry forever), all turned off
    network_features = (
        "plugins", "apps", "remote_plugin", "recommended_plugins", "plugin_sharing",
        "memories", "image_generation", "tool_suggest", "goals", "shell_snapshot",
        "browser_use", "browser_use_external", "computer_use", "in_app_browser",
        "in_app_updates", "daemon_auto_start", "api_key_model_discovery",
        "skill_mcp_dependency_install", "workspace_dependencies", "unbounded_connection_retries",
        "system_proxy_fallback",
    )

    def executable(self, root: Path | None = None) -> Path:
        npm_arch, triple = _arch()
        return _npm_native(root or runtimes_root(), f"@openai/codex-linux-{npm_arch}",
                           f"vendor/{triple}-unknown-linux-musl/bin/codex")

    def model_entry(self, model: str) -> dict[str, Any]:
        """A model catalog entry for ``model``: offers ``apply_patch`` and the shell tool."""
        return {"slug": model, "display_name": model, "description": "loopback model server",
                "supported_reasoning_levels": [], "shell_type": "unified_exec",
                "visibility": "list", "supported_in_api": True, "priority": 1,
                "support_verbosity": False, "apply_patch_tool_type": "freeform",
                "truncation_policy": {"mode": "tokens", "limit": 10000},
                "experimental_supported_tools": [], "context_window": 272000,
                "base_instructions": "You are a coding agent. Use the tools to complete the "
                                     "task in the current working directory."}

    def config(self, base_url: str, model: str, catalog: Path) -> dict[str, Any]:
        """The ``config.toml`` contents (as a mapping) for a loopback run."""
        return {
            "model": model, "model_provider": self.provider,
            "model_catalog_json": str(catalog),
            "approval_policy": "never", "sandbox_mode": "danger-full-access",
            "check_for_update_on_startup": False, "web_search": "disabled",
            "model_providers": {self.provider: {
                "name": "ripplecp loopback model server", "base_url": base_url.rstrip("/") + "/v1",
                "env_key": self.key_env, "wire_api": "responses", "supports_websockets": False,
                "request_max_retries": 0, "stream_max_retries": 0}},
            "features": {f: False for f in self.network_features},
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
            "agents": {"enabled": False},
        }

    def prepare_home(self, home: Path, base_url: str, model: str = DEFAULT_MODEL) -> None:
        catalog = home / "model_catalog.json"
        catalog.write_text(json.dumps({"models": [self.model_entry(model)]}, indent=1) + "\n")
        (home / "config.toml").write_text(toml_text(self.config(base_url, model, catalog)))

    def env(self, home: Path, base_url: str) -> dict[str, str]:
        return {**base_env(home), "CODEX_HOME": str(home), self.key_env: DUMMY_KEY}

    def argv(self, prompt: str, *, home: Path, model: str = DEFAULT_MODEL,
             resume: str | None = None, fork: bool = False, base_url: str = "",
             root: Path | None = None, extra: Sequence[str] = ()) -> list[str]:
        head = [str(self.executable(root)), "exec", "--json", "--skip-git-repo-check",
                "--strict-config", *extra]
        if resume is None:
            return [*head, prompt]
        return [*head, "fork" if fork else "resume", resume, prompt]

    def sessions(self, home: Path) -> list[Path]:
        return sorted((Path(home) / "sessions").glob("*/*/*/rollout-*.jsonl"))

    def seed_home(self, home: Path, session_file: Path, cwd: Path) -> Path:
        """Copy a rollout into ``home/sessions/`` (same dated subpath) for ``resume``/``fork``."""
        session_file = Path(session_file)
        parts = session_file.parts
        dated = parts[-4:] if len(parts) >= 4 and re.fullmatch(r"\d{4}", parts[-4]) else \
            ("2000", "01", "01", session_file.name)
        dest = Path(home) / "sessions" / Path(*dated)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(session_file, dest)
        return dest

    @staticmethod
    def thread_id(session_file: Path) -> str:
        """The thread id in a rollout file name (``rollout-<time>-<thread id>.jsonl``)."""
        m = re.search(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$",
                      Path(session_file).name)
        if not m:
            raise ValueError(f"{session_file}: not a Codex rollout file name")
        return m.group(1)


class ClaudeCode(Runtime):
    """Claude Code (``claude -p --output-format stream-json``) against loopback Messages."""

    spec = RuntimeSpec("claude-code", "npm", "@anthropic-ai/claude-code", "2.1.197",
                       "proprietary (install at run time, never vendor)")
    rules = "oracle.agents.runtime:CLAUDE_RULES"
    stream_format = "claude-code-stream"
    session_format = "claude-code-session"
    drives_brains = True
    #: tools that fetch from the network, denied in the settings
    network_tools = ("WebFetch", "WebSearch")

    def executable(self, root: Path | None = None) -> Path:
        npm_arch, _ = _arch()
        return _npm_native(root or runtimes_root(), f"@anthropic-ai/claude-code-linux-{npm_arch}",
                           "claude")

    @staticmethod
    def config_dir(home: Path) -> Path:
        return Path(home) / ".claude"

    def settings(self) -> dict[str, Any]:
        """``settings.json``: web tools denied, no auto-update, no telemetry."""
        return {"permissions": {"deny": list(self.network_tools)}, "autoUpdates": False,
                "includeCoAuthoredBy": False}

    def prepare_home(self, home: Path, base_url: str, model: str = DEFAULT_MODEL) -> None:
        cfg = self.config_dir(home)
        cfg.mkdir(parents=True, exist_ok=True)
        (cfg / "settings.json").write_text(json.dumps(self.settings(), indent=1) + "\n")

    def env(self, home: Path, base_url: str) -> dict[str, str]:
        env = {**base_env(home), "CLAUDE_CONFIG_DIR": str(self.config_dir(home)),
               "ANTHROPIC_BASE_URL": base_url.rstrip("/"), "ANTHROPIC_API_KEY": DUMMY_KEY,
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
               "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1", "CLAUDE_CODE_MAX_RETRIES": "0"}
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"  # else --dangerously-skip-permissions is refused as root
        return env

    def argv(self, prompt: str, *, home: Path, model: str = DEFAULT_MODEL,
             resume: str | None = None, fork: bool = False, base_url: str = "",
             root: Path | None = None, extra: Sequence[str] = ()) -> list[str]:
        argv = [str(self.executable(root)), "-p", "--output-format", "stream-json", "--verbose",
                "--dangerously-skip-permissions", "--model", model, *extra]
        if resume is not None:
            argv += ["--resume", resume] + (["--fork-session"] if fork else [])
        return [*argv, prompt]

    def sessions(self, home: Path) -> list[Path]:
        found = (self.config_dir(home) / "projects").glob("*/*.jsonl")
        return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))

    @staticmethod
    def project_slug(cwd: Path) -> str:
        """The folder name Claude Code files a working directory's sessions under."""
        return re.sub(r"[^A-Za-z0-9]", "-", str(Path(cwd).resolve()))

    def seed_home(self, home: Path, session_file: Path, cwd: Path) -> Path:
        """Copy a session file into ``home``'s project folder for ``cwd`` (for ``--resume``)."""
        dest = self.config_dir(home) / "projects" / self.project_slug(cwd) / Path(session_file).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(session_file, dest)
        return dest


class MiniSweAgent(Runtime):
    """mini-swe-agent (``mini -y --exit-immediately``) through litellm's chat completions.

    It has no resume of its own: ``resume`` runs :mod:`oracle.agents.mini_resume` with
    mini-swe-agent's own interpreter, the ``mini`` command line that starts from the messages
    of a preserved trajectory (put into ``home/resume/`` by :meth:`seed_home`; ``resume``
    names the file there) with the prompt as a new user message. The new run writes the
    whole conversation to its own ``home/trajectory.json``, so a resume never appends to the
    captured file (a fork, whatever ``fork`` says).
    """

    spec = RuntimeSpec("mini-swe-agent", "pypi", "mini-swe-agent", "2.4.6", "MIT")
    rules = "oracle.agents.runtime:MINI_RULES"
    stream_format = "mini-swe-agent"  # it prints no stream: its trajectory file is watched
    session_format = "mini-swe-agent"
    probe_args = ("--help",)  # it has no --version; the help's first line states it
    #: the trajectory file a run writes in its home (``-o``), rewritten after every step
    trajectory = "trajectory.json"
    #: the resume entry point, run with the runtime's own interpreter
    resume_script = Path(__file__).resolve().parent / "mini_resume.py"

    def executable(self, root: Path | None = None) -> Path:
        return (root or runtimes_root()) / "mini-swe-agent" / "bin" / "mini"

    def python(self, root: Path | None = None) -> Path:
        """The interpreter of the runtime's virtual environment (runs the resume entry)."""
        return (root or runtimes_root()) / "mini-swe-agent" / "bin" / "python"

    def prepare_home(self, home: Path, base_url: str, model: str = DEFAULT_MODEL) -> None:
        (Path(home) / "mini-swe-agent").mkdir(parents=True, exist_ok=True)

    def env(self, home: Path, base_url: str) -> dict[str, str]:
        return {**base_env(home), "MSWEA_CONFIGURED": "true",
                "MSWEA_GLOBAL_CONFIG_DIR": str(Path(home) / "mini-swe-agent"),
                "MSWEA_COST_TRACKING": "ignore_errors",
                "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def argv(self, prompt: str, *, home: Path, model: str = DEFAULT_MODEL,
             resume: str | None = None, fork: bool = False, base_url: str = "",
             root: Path | None = None, extra: Sequence[str] = ()) -> list[str]:
        options = ["-y", "--exit-immediately", "-m", f"openai/{model}", "-c", "mini.yaml",
                   "-c", f"model.model_kwargs.api_base={base_url.rstrip('/')}/v1",
                   "-c", f"model.model_kwargs.api_key={DUMMY_KEY}",
                   "-o", str(Path(home) / self.trajectory), *extra, "-t", prompt]
        if resume is None:
            return [str(self.executable(root)), *options]
        saved = Path(home) / "resume" / resume
        if Path(resume).name != resume:
            raise ValueError(f"mini-swe-agent resume {resume!r}: name a file of home/resume/")
        return [str(self.python(root)), str(self.resume_script), str(saved), *options]

    def sessions(self, home: Path) -> list[Path]:
        p = Path(home) / self.trajectory
        return [p] if p.exists() else []

    def seed_home(self, home: Path, session_file: Path, cwd: Path) -> Path:
        """Copy a trajectory into ``home/resume/`` (``resume`` then names it)."""
        dest = Path(home) / "resume" / Path(session_file).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(session_file, dest)
        return dest


#: every runtime, by name: the one list the registry, the command lines and the studies read
RUNTIMES: dict[str, Runtime] = {r.spec.name: r for r in (Codex(), ClaudeCode(), MiniSweAgent())}


def runtime_names(*, drives_brains: bool = False) -> tuple[str, ...]:
    """The runtimes' names (only those the LLM-free agents can be brains behind, if asked)."""
    return tuple(n for n, r in RUNTIMES.items() if r.drives_brains or not drives_brains)


def get_runtime(name: str) -> Runtime:
    """A runtime by name; a one-line error lists the names."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown runtime {name!r}; choose from {', '.join(RUNTIMES)}") from None


# --------------------------------------------------------------------------- installing


def _run(argv: Sequence[str], what: str, timeout: float) -> None:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeInstallError(f"{what}: timed out after {timeout:.0f} s") from None
    except OSError as exc:
        raise RuntimeInstallError(f"{what}: {exc}") from None
    if p.returncode != 0:
        tail = [ln for ln in (p.stderr or p.stdout).splitlines() if ln.strip()][-1:] or ["?"]
        raise RuntimeInstallError(f"{what}: exit {p.returncode}: {tail[0].strip()}")


def _npm_version(root: Path, package: str) -> str | None:
    meta = root / "npm" / "node_modules" / package / "package.json"
    try:
        return json.loads(meta.read_text()).get("version")
    except (OSError, ValueError):
        return None


def install(name: str, root: Path | None = None, *, timeout: float = 900.0) -> Installed:
    """Install runtime ``name`` at its pinned version under ``root`` (idempotent).

    Raises :class:`RuntimeInstallError` (one line) where npm is missing, the registry is
    unreachable, or the installed program does not probe as the pinned version.
    """
    rt = get_runtime(name)
    root = Path(root or runtimes_root())
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent installers take turns
        found = rt.probe(root)
        if found.usable:
            return found
        spec = rt.spec
        if spec.registry == "npm":
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeInstallError(f"cannot install {spec.name}: npm is not on PATH "
                                          "(install Node.js with npm)")
            if _npm_version(root, spec.package) != spec.version:
                (root / "npm").mkdir(exist_ok=True)
                _run([npm, "--prefix", str(root / "npm"), "install", "--no-audit", "--no-fund",
                      "--save-exact", "--loglevel=error", f"{spec.package}@{spec.version}"],
                     f"npm install {spec.package}@{spec.version}", timeout)
        else:
            venv = root / spec.name
            py = venv / "bin" / "python"
            if not py.exists():
                _run([sys.executable, "-m", "venv", str(venv)], f"python -m venv {venv}", timeout)
            uv = shutil.which("uv")  # the same install, ~10x faster, where uv is installed
            cmd = ([uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", str(py)]
                   if uv else
                   [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            _run([*cmd, f"{spec.package}=={spec.version}"],
                 f"{'uv ' if uv else ''}pip install {spec.package}=={spec.version}", timeout)
        found = rt.probe(root)
        if not found.usable:
            raise RuntimeInstallError(f"{spec.name} installed but not usable: {found.detail}")
        return found


def installed(root: Path | None = None) -> list[Installed]:
    """Every known runtime as found under ``root``, each version probed by running it."""
    return [rt.probe(root) for rt in RUNTIMES.values()]
