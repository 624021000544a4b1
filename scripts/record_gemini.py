"""Record real Gemini CLI runs against the loopback model server (Gemini API protocol).

    unshare -rn sh -c 'ip link set lo up && python scripts/record_gemini.py'

Gemini CLI (npm ``@google/gemini-cli``, installed with ``npm install --prefix
.runtimes/gemini @google/gemini-cli@0.61.0``) is run headless (``-p``, ``--output-format
stream-json``, ``--yolo``) with the model pinned (``-m gemini-2.5-flash``: with ``auto`` its
router first sends a classifier request of its own), an API key of ``x`` and
``GOOGLE_GEMINI_BASE_URL`` = the server on 127.0.0.1; a fresh ``HOME`` per run holds a
``settings.json`` choosing API-key auth and turning off usage statistics, telemetry and
update checks. Under ``unshare -rn`` (a network namespace with only loopback) nothing can
leave the machine, so a run that completes proves the CLI needs nothing else. Runs, each a
scripted brain in a fresh workspace under the fixed folder ``--work`` (wiped first):

* ``task``: the Codex/Claude Code recordings' task (a shell command writes hello.txt, an
  edit, two parallel shell calls, a final message);
* ``failing``: two parallel failing commands (``echo oops; exit 3`` and a silent ``exit
  4``), a ``write_file``, a final message.

Written to ``OUT/gemini-cli-<version>/``: ``<run>.stream.jsonl`` (the CLI's stdout),
``<run>.session.jsonl`` (its chat file, ``~/.gemini/tmp/<project>/chats/session-*.jsonl``) and
``model_server.audit.jsonl`` (both runs; keys ``task/…``, ``failing/…``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a file: import the project next to it
    sys.path.insert(0, str(REPO))

from oracle.agents.model_server import ModelServer, Plan, ScriptedBrain, ServerConfig  # noqa: E402
from ripplecp_cli import run  # noqa: E402

MODEL = "gemini-2.5-flash"
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"},
                         "folderTrust": {"enabled": False}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True}}


def _plans(work: Path) -> dict[str, tuple[str, Plan]]:
    notes = str(work / "ws-failing" / "notes.txt")
    return {
        "task": ("Create hello.txt saying hello world.", Plan.from_json([
            {"shell": "printf 'hello\\n' > hello.txt", "text": "Creating the file."},
            {"edit": {"path": "hello.txt", "old": "hello", "new": "hello world"}},
            {"calls": [{"shell": "wc -c hello.txt"}, {"shell": "ls"}]},
            {"finish": "hello.txt now says hello world."}])),
        "failing": ("Run the checks and note the result.", Plan.from_json([
            {"calls": [{"shell": "echo oops; exit 3"}, {"shell": "exit 4"}],
             "text": "Running both checks."},
            {"call": {"name": "write_file",
                      "arguments": {"file_path": notes, "content": "both checks failed\n"}}},
            {"finish": "Both checks failed; noted in notes.txt."}])),
    }


@dataclass(frozen=True)
class Args:
    """Record real Gemini CLI stream-json logs for the readers' tests."""

    gemini: Path = REPO / ".runtimes" / "gemini" / "node_modules" / ".bin" / "gemini"
    """the gemini executable (npm @google/gemini-cli)"""
    out: Path = REPO / "tests" / "data" / "recordings"
    """folder the recording goes to (a subfolder gemini-cli-<version>)"""
    work: Path = Path("/tmp/ripplecp-recordings/gemini")
    """fixed work folder (wiped first); its paths appear in what the CLI writes"""


def record(a: Args) -> Path:
    env0 = {"PATH": f"{Path(shutil.which('node') or '/usr/bin/node').parent}:/usr/bin:/bin",
            "TERM": "dumb", "NO_COLOR": "1", "GEMINI_API_KEY": "x",
            "GEMINI_CLI_TRUST_WORKSPACE": "true"}
    shutil.rmtree(a.work, ignore_errors=True)
    (a.work / "home-version").mkdir(parents=True)  # the CLI makes HOME/.gemini even here
    version = subprocess.run([str(a.gemini), "--version"], capture_output=True, text=True,
                             check=True, env={**env0, "HOME": str(a.work / "home-version")}
                             ).stdout.strip()
    out = a.out / f"gemini-cli-{version}"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.jsonl"):  # what a run writes (README.md stays)
        old.unlink()
    audit = out / "model_server.audit.jsonl"
    for name, (prompt, plan) in _plans(a.work).items():
        ws, home = a.work / f"ws-{name}", a.work / f"home-{name}"
        ws.mkdir(parents=True)
        (home / ".gemini").mkdir(parents=True)
        (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS, indent=2))
        with ModelServer(ScriptedBrain(plan), ServerConfig(audit=audit, run_id=name)) as srv:
            env = {**env0, "HOME": str(home), "GOOGLE_GEMINI_BASE_URL": srv.url}
            p = subprocess.run([str(a.gemini), "-m", MODEL, "-p", prompt, "--output-format",
                                "stream-json", "--yolo"], cwd=ws, env=env, capture_output=True,
                               text=True, timeout=300)
        (a.work / f"{name}.stderr.txt").write_text(p.stderr)
        if p.returncode != 0:
            raise RuntimeError(f"gemini ({name}) exited {p.returncode}: {p.stderr[-800:]}")
        (out / f"{name}.stream.jsonl").write_text(p.stdout)
        [chat] = sorted((home / ".gemini" / "tmp").glob("*/chats/session-*.json*"))
        shutil.copyfile(chat, out / f"{name}.session{''.join(chat.suffixes[-1:])}")
    return out


def main_(a: Args) -> int:
    print(record(a))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(main_, Args, argv, prog="python scripts/record_gemini.py")


if __name__ == "__main__":
    sys.exit(main())
