"""Record a real Aider session against the loopback model server (chat completions).

    python scripts/record_aider.py --aider .runtimes/aider/bin/aider [--out tests/data/recordings]

Aider (PyPI ``aider-chat``, installed into a venv of its own: ``python3 -m venv
.runtimes/aider && .runtimes/aider/bin/pip install aider-chat==0.86.2``) talks to the server
through litellm as an OpenAI-compatible model (``openai/scripted``, ``OPENAI_API_BASE`` on
127.0.0.1); nothing leaves the machine. The session is a real git workspace under the fixed
folder ``--work`` (wiped first), fed its inputs on stdin with ``--yes-always``:

1. a prompt: the model answers with two SEARCH/REPLACE blocks (``hello.py``, whose
   ``greet`` says ``hi``, and ``test_hello.py``, which expects ``hello``) and a ```bash
   block (a suggested command; ``--yes-always`` declines suggested commands, so it is not
   run);
2. ``/run python -m pytest -q``: the user runs the tests (they fail), output added;
3. ``/test python -m pytest -q``: fails again, so Aider sends the output to the model,
   which answers with a fix (one SEARCH/REPLACE block);
4. ``/test python -m pytest -q``: passes (nothing is added);
5. ``!git log --oneline``.

Aider commits each edit (auto-commits): each commit message is one more model request (a
commit prompt), answered here with a fixed message. Written to ``OUT/aider-<version>/``:
``.aider.chat.history.md`` and ``.aider.llm.history`` as Aider wrote them, and the
server's audit log ``model_server.audit.jsonl``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a file: import the project next to it
    sys.path.insert(0, str(REPO))

from oracle.agents.model_server import (  # noqa: E402
    Conversation,
    ModelServer,
    ServerConfig,
    Step,
    StepBrain,
)
from ripplecp_cli import run  # noqa: E402

FIRST = """I'll add `greet()` and a test for it.

hello.py
```python
<<<<<<< SEARCH
=======
def greet(name):
    return f"hi {name}"
>>>>>>> REPLACE
```

test_hello.py
```python
<<<<<<< SEARCH
=======
from hello import greet


def test_greet():
    assert greet("x") == "hello x"
>>>>>>> REPLACE
```

Run the test with:

```bash
python -m pytest -q
```
"""

FIX = """The test expects `hello`, so `greet` must say hello.

hello.py
```python
<<<<<<< SEARCH
    return f"hi {name}"
=======
    return f"hello {name}"
>>>>>>> REPLACE
```
"""

INPUTS = [
    "Create hello.py with greet(name) and test_hello.py testing it.",
    "/run python -m pytest -q",
    "/test python -m pytest -q",
    "/test python -m pytest -q",
    "!git log --oneline",
]


class AiderScript(StepBrain):
    """Answers Aider's requests from their content: a commit-message request gets a fixed
    message, the first prompt the two new files, a failing test's output the fix."""

    name = "aider-script"

    def next_step(self, conversation: Conversation) -> Step:
        system = "\n".join(m.text for m in conversation.messages if m.role == "system")
        last = next((m.text for m in reversed(conversation.messages) if m.role == "user"), "")
        if "Git commit messages" in system:
            msg = "fix: make greet say hello" if "hello {name}" in last else "feat: add greet"
            return Step(text=msg)
        if "Create hello.py" in last:
            return Step(text=FIRST)
        if "failed" in last and "hello" in last:
            return Step(text=FIX)
        return Step(text="Ok.")


@dataclass(frozen=True)
class Args:
    """Record a real Aider chat history and LLM history for the readers' tests."""

    aider: Path = REPO / ".runtimes" / "aider" / "bin" / "aider"
    """the aider executable (of its own venv)"""
    out: Path = REPO / "tests" / "data" / "recordings"
    """folder the recording goes to (a subfolder aider-<version>)"""
    work: Path = Path("/tmp/ripplecp-recordings/aider")
    """fixed work folder (wiped first); its paths appear in what Aider writes"""


def record(a: Args) -> Path:
    version = subprocess.run([str(a.aider), "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[-1]
    out = a.out / f"aider-{version}"
    shutil.rmtree(a.work, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ws, home = a.work / "ws", a.work / "home"
    ws.mkdir(parents=True)
    home.mkdir()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home),
           "GIT_AUTHOR_NAME": "rec", "GIT_AUTHOR_EMAIL": "rec@example.invalid",
           "GIT_COMMITTER_NAME": "rec", "GIT_COMMITTER_EMAIL": "rec@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": "x", "TERM": "dumb",
           "AIDER_CHECK_UPDATE": "false", "AIDER_ANALYTICS": "false"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=ws, env=env, check=True)
    for key in ("user.name", "user.email"):
        subprocess.run(["git", "config", key, env["GIT_AUTHOR_EMAIL"] if "email" in key
                        else env["GIT_AUTHOR_NAME"]], cwd=ws, env=env, check=True)
    exe = a.work / "bin" / "aider"  # a fixed path: Aider writes its command line in the log
    exe.parent.mkdir()
    exe.symlink_to(a.aider.resolve())
    with ModelServer(AiderScript(), ServerConfig(audit=out / "model_server.audit.jsonl",
                                                 run_id="aider")) as srv:
        env["OPENAI_API_BASE"] = f"{srv.url}/v1"
        argv = [str(exe), "--model", "openai/scripted", "--edit-format", "diff",
                "--yes-always", "--no-pretty", "--no-fancy-input", "--no-stream",
                "--map-tokens", "0", "--no-gitignore", "--no-show-model-warnings",
                "--no-check-update", "--no-analytics", "--no-show-release-notes",
                "--chat-history-file", str(ws / ".aider.chat.history.md"),
                "--llm-history-file", str(ws / ".aider.llm.history"),
                "--input-history-file", str(home / "input.history")]
        p = subprocess.run(argv, cwd=ws, env=env, input="\n".join(INPUTS) + "\n",
                           capture_output=True, text=True, timeout=300)
        (a.work / "stdout.txt").write_text(p.stdout + "\n--- stderr\n" + p.stderr)
        if p.returncode != 0:
            raise RuntimeError(f"aider exited {p.returncode}: {p.stderr[-800:]}")
    for name in (".aider.chat.history.md", ".aider.llm.history"):
        shutil.copyfile(ws / name, out / name)
    return out


def main_(a: Args) -> int:
    print(record(a))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(main_, Args, argv, prog="python scripts/record_aider.py")


if __name__ == "__main__":
    sys.exit(main())
