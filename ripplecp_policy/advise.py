"""``python -m ripplecp_policy.advise``: a learned placement policy following a live agent session.

Three ways in, one advisor (:class:`ripplecp_policy.advisor.Advisor`), one decision log:

- a command: ``python -m ripplecp_policy.advise --model URI --budget count:2 --store DIR
  --log decisions.jsonl -- codex exec --json …`` runs the command, copies its output to
  stdout, follows it line by line as it arrives and checkpoints the workspace on CP; exits
  with the command's status;
- a recorded log: ``--input LOGFILE`` replays it as a stream;
- a Claude Code hook: ``--hook claude-code`` reads the ``PostToolUse`` hook's JSON on stdin,
  follows the session's transcript and checkpoints on CP (the boundaries earlier calls
  decided are read back from the log); always exits 0.

Fail-open: a model that does not load, a line that does not parse, a checkpoint that fails
make the boundary SKIP with the reason in the log; the agent never stops because of the
advisor. Arguments are checked before anything runs (wrong ones: one line, exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from features.readers import READERS
from ripplecp_cli import CommandLineError, existing_dir, existing_file, opt, progress, run
from ripplecp_policy.advisor import (
    Advisor,
    AdvisorModel,
    load_model,
    read_decisions,
    resolve_budget,
    store_for,
)
from ripplecp_policy.policy import Budget, BudgetSpec

PROG = "python -m ripplecp_policy.advise"
#: the line-oriented formats (and their aliases) a session can be followed in
STREAM_FORMATS: tuple[str, ...] = tuple(
    n for r in READERS if r.parser is not None for n in (r.name, *r.aliases))
URI_SCHEMES = ("runs:/", "models:/", "file:", "s3:", "gs:", "http:", "https:", "dbfs:", "mlflow-artifacts:")


def model_uri(text: str) -> None:
    """``check=``: an MLflow model URI, or a local model folder that exists."""
    if not text.startswith(URI_SCHEMES):
        existing_dir(text)
        if not (Path(text) / "MLmodel").is_file():
            raise ValueError(f"{text}: not an MLflow model folder (no MLmodel file)")


@dataclass(frozen=True)
class Args:
    """Follow one agent session with a learned placement policy: CP or SKIP at every safe
    boundary under a budget, checkpoints taken with the toolkit's store, every decision
    logged. Give exactly one of: --input LOGFILE, --hook claude-code, or -- COMMAND ...
    (the command to run and follow, after a lone --)."""

    model: str = opt(check=model_uri, metavar="URI")
    """the policy: an MLflow model URI (runs:/RUN/policy, models:/NAME/VERSION) or a local
    model folder"""
    budget: BudgetSpec | None = opt(None, check=BudgetSpec.parse, metavar="SPEC")
    """the budget per session: count:N, seconds:S, bytes:B, or seconds:Kx / bytes:Kx (K times
    the model's mean training checkpoint cost); default: the model's own budget"""
    log: Path = Path("decisions.jsonl")
    """the decision log (JSON lines, appended)"""
    input: Path | None = opt(None, check=existing_file, metavar="LOGFILE")
    """replay this recorded session as a stream"""
    hook: Literal["claude-code"] | None = None
    """run as this runtime's hook (reads the hook's JSON on stdin)"""
    format: str | None = opt(None, choices=STREAM_FORMATS)
    """the log's format (default: detected from its first line)"""
    store: Path | None = opt(None, metavar="DIR")
    """the checkpoint store a CP writes to (created if absent); without it, decisions only"""
    workspace: Path | None = opt(None, check=existing_dir, metavar="DIR")
    """the folder a CP checkpoints (default: the hook's cwd, else the current directory)"""
    mlruns: Path | None = opt(None, metavar="DIR")
    """the MLflow store runs:/ and models:/ URIs are read from (default: $RIPPLECP_MLRUNS or
    ./mlruns)"""
    seed: int = opt(0, min=0)
    """the seed a stochastic policy is reset with"""
    echo: bool = True
    """with a command: copy its standard output to ours"""


def _check_modes(args: Args, command: Sequence[str]) -> None:
    given = [m for m, on in (("--input", args.input is not None), ("--hook", args.hook is not None),
                              ("-- COMMAND", bool(command))) if on]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise CommandLineError(f"give exactly one of --input LOGFILE, --hook claude-code or "
                               f"-- COMMAND ..., got {what}")
    if args.hook is not None and args.format not in (None, "claude-code-session", "claude-code",
                                                     "claude-session"):
        raise CommandLineError(f"argument --format: a Claude Code hook follows the session "
                               f"file (claude-code-session), not {args.format}")


def _load(args: Args) -> tuple[AdvisorModel | None, str | None, Budget]:
    """The model (fail-open: None and why) and the budget to follow the session under."""
    try:
        model = load_model(args.model, mlruns=args.mlruns)
    except Exception as exc:  # fail-open: the session runs, every boundary is SKIP
        reason = f"model {args.model} did not load: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        print(f"{PROG}: warning: {reason}; every boundary is SKIP", file=sys.stderr)
        spec = args.budget
        budget = Budget(spec.kind, spec.amount) if spec is not None and not spec.relative \
            else Budget("count", 0)
        return None, reason, budget
    return model, None, resolve_budget(args.budget, model.config)


def _advisor(args: Args, workspace: Path, *, source: str | Path, session: str | None = None,
             fmt: str | None = None, catch_up: bool = False) -> Advisor:
    model, error, budget = _load(args)
    store = store_for(args.store, workspace) if args.store is not None else None
    prior = read_decisions(args.log, session) if catch_up and session else ()
    return Advisor(model, budget, format=fmt or args.format, log=args.log, store=store,
                   workspace=workspace, session=session, source=source, seed=args.seed,
                   load_error=error, prior=prior, catch_up=catch_up)


def _summary(adv: Advisor) -> None:
    cps = adv.checkpoints
    ids = ", ".join(d.checkpoint_id or f"boundary {d.boundary}" for d in cps) or "none"
    print(f"{PROG}: {len(adv.decisions)} decisions, {len(cps)} checkpoints ({ids}), budget "
          f"left {adv.remaining:g} of {adv.budget.label()}", file=sys.stderr)


def replay(args: Args) -> int:
    """``--input``: the recorded session, line by line."""
    workspace = (args.workspace or Path.cwd()).resolve()
    adv = _advisor(args, workspace, source=args.input)
    with open(args.input, "rb") as f:
        for line in progress(f, desc=f"following {args.input.name}", unit="line"):
            adv.feed(line)
    adv.finish()
    _summary(adv)
    return 0


def follow(args: Args, command: Sequence[str]) -> int:
    """``-- COMMAND``: run it, copy and follow its output live; its exit status."""
    workspace = (args.workspace or Path.cwd()).resolve()
    adv = _advisor(args, workspace, source=Path(command[0]).name)
    proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, cwd=workspace)
    assert proc.stdout is not None
    out = sys.stdout.buffer
    try:
        for line in proc.stdout:
            if args.echo:
                out.write(line)
                out.flush()
            adv.feed(line, arrival_s=time.time())
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        code = proc.wait()
    adv.finish()
    _summary(adv)
    return code


def hook(args: Args, stdin: Any = None) -> int:
    """``--hook claude-code``: one PostToolUse call; never fails the session (exit 0)."""
    try:
        event = json.load(stdin or sys.stdin)
        transcript = Path(event["transcript_path"])
        workspace = (args.workspace or Path(event.get("cwd") or Path.cwd())).resolve()
        session = str(event.get("session_id") or transcript.stem)
        adv = _advisor(args, workspace, source=transcript, session=session,
                       fmt="claude-code-session", catch_up=True)
        with open(transcript, "rb") as f:
            for line in f:
                adv.feed(line)
        adv.finish()
    except Exception as exc:  # fail-open, said on stderr (Claude Code shows it, goes on)
        print(f"{PROG}: advisor skipped this boundary: {type(exc).__name__}: {exc}",
              file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options (everything after a lone ``--`` is the command to follow) and run."""
    words = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in words:
        cut = words.index("--")
        words, command = words[:cut], words[cut + 1:]

    def start(args: Args) -> int:
        _check_modes(args, command)
        if args.hook is not None:
            return hook(args)
        if args.input is not None:
            return replay(args)
        return follow(args, command)

    return run(start, Args, words, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
