"""The simulated agent behind the agent protocol, on a virtual clock.

``start`` emits the task's nominal trajectory (:mod:`oracle.simulator.model`) boundary by
boundary; ``kill`` abandons the run and records, in the simulated world (never in the
workspace or transcript), how far it got, i.e. which failure struck; ``resume``
re-derives from the preserved transcript and facts with events whose durations add up to
:func:`~oracle.simulator.model.branch_costs`'s ``J``, the number the fast path computes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from features.schema import Event, EventKind
from oracle.protocol import AgentReport, Clock, RestorePoint, TaskSpec
from oracle.simulator.model import (
    KIND_CODE,
    Granularity,
    LatentTask,
    branch_costs,
    cached_task,
    task_specs,
)
from oracle.simulator.workloads import FamilyConfig, get_family

__all__ = ["STATE_FILE", "SimulatedAgent", "SimulatedRun"]

STATE_FILE = ".ripplecp_sim/state.json"


@dataclass
class _Item:
    event: dict[str, Any] | None = None  # Event fields without index/start/end
    seconds: float = 0.0
    boundary: int | None = None
    fact: tuple[str, str] | None = None  # (name, value) the event discovers


class SimulatedRun:
    """One simulated run: replays a precomputed item list on the clock, live.

    ``reports()`` sleeps each event's duration on the clock, then yields it (stamped with
    clock times); at a boundary it writes the workspace state file and snapshots the
    preserved transcript and facts. ``kill()`` abandons the run (fail-stop).
    """

    def __init__(
        self, agent: SimulatedAgent, lt: LatentTask, items: list[_Item], workspace: Path,
        clock: Clock, transcript: list[dict], facts: dict[str, Any], first_boundary: int,
        granularity: Granularity,
    ) -> None:
        self._agent, self._lt, self._items = agent, lt, items
        self._ws, self._clock, self._gran = Path(workspace), clock, granularity
        self._transcript = list(transcript)
        self._facts = dict(facts)
        self._preserved = (list(transcript), dict(facts))
        self._last_boundary = first_boundary
        self._killed = False
        self._done = False
        self.usage: dict[str, Any] = {"tokens": 0, "tool_calls": 0}

    def reports(self) -> Iterator[AgentReport]:
        n = 0
        for it in self._items:
            if self._killed:
                return
            if it.boundary is not None:
                self._last_boundary = it.boundary
                self._agent._write_state(self._ws, self._lt, it.boundary, complete=False)
                self._preserved = (list(self._transcript), dict(self._facts))
                yield AgentReport("boundary", boundary=it.boundary)
                continue
            assert it.event is not None
            start = self._clock.now()
            self._clock.sleep(it.seconds)
            ev = Event(index=n, start=start, end=self._clock.now(), duration=it.seconds, **it.event)
            n += 1
            if self._killed:
                return
            toks = (ev.input_tokens or 0) + (ev.output_tokens or 0)
            self.usage["tokens"] += toks
            if ev.kind not in (EventKind.MODEL_CALL, EventKind.MESSAGE):
                self.usage["tool_calls"] += 1
            self._transcript.append({
                "index": len(self._transcript), "kind": str(ev.kind), "step": ev.step,
                "text": ev.command or ev.text or "", "tokens": toks,
            })
            if it.fact is not None:
                self._facts[it.fact[0]] = it.fact[1]
            yield AgentReport("event", event=ev)
        if not self._killed:
            self._done = True
            self._agent._write_state(self._ws, self._lt, self._last_boundary, complete=True)
            self._agent._frontier[self._lt.task_id] = len(self._lt.positions(self._gran))

    def preserved(self) -> tuple[list[dict], dict[str, Any]]:
        return list(self._preserved[0]), dict(self._preserved[1])

    def kill(self) -> None:
        if not self._killed and not self._done:
            self._killed = True
            # the simulated world remembers how far the abandoned run got (hidden state)
            self._agent._frontier[self._lt.task_id] = self._last_boundary + 1

    def wait(self) -> int:
        return -9 if self._killed else 0


class SimulatedAgent:
    """The simulated agent of a workload family, behind the agent protocol.

    ``task.params`` (from :func:`task_specs`) rebuild the hidden task; ``granularity``
    (``"turn"`` | ``"tool_call"``) picks which boundaries are reported. The simulated world
    remembers, per task, how far the last killed run got; branches of one task must
    therefore run one after another on one agent instance (the harness's local executor).
    """

    def __init__(self, family: FamilyConfig | str = "swe-pilot", granularity: Granularity | None = None) -> None:
        self.family = get_family(family)
        self.name = f"sim:{self.family.name}"
        self.granularity = granularity
        self._frontier: dict[str, int] = {}

    # -- task plumbing ------------------------------------------------------------------
    def latent(self, task: TaskSpec) -> LatentTask:
        """The hidden task behind ``task`` (rebuilt deterministically from its params)."""
        p = task.params
        missing = [k for k in ("repo_index", "task_index", "seed") if k not in p]
        if missing:
            raise ValueError(f"{task.task_id}: TaskSpec.params lacks {missing} (use oracle.simulator.task_specs)")
        fam = self.family
        if p.get("family", fam.name) != fam.name:
            fam = get_family(p["family"])
        if int(p.get("tasks_per_repo", fam.tasks_per_repo)) != fam.tasks_per_repo:
            fam = fam.with_tasks_per_repo(int(p["tasks_per_repo"]))
        lt = cached_task(fam, int(p["repo_index"]), int(p["task_index"]), int(p["seed"]))
        if lt.task_id != task.task_id:
            raise ValueError(f"TaskSpec {task.task_id!r} does not match its params (rebuilds {lt.task_id!r})")
        return lt

    def make_tasks(self, n: int, seed: int, root: Path | None = None, *,
                   n_repos: int | None = None, tasks_per_repo: int | None = None) -> list[TaskSpec]:
        """The first ``n`` tasks of the family's study (``n_repos`` x ``tasks_per_repo``);
        simulated tasks live in their params, so ``root`` is unused. A count the study
        cannot hold is an error naming the sizes that would."""
        del root
        specs = task_specs(self.family, n_repos, tasks_per_repo, seed,
                           granularity=self.granularity or "turn")
        if n > len(specs):
            repos = self.family.n_study_repos if n_repos is None else n_repos
            per = self.family.tasks_per_repo if tasks_per_repo is None else tasks_per_repo
            raise ValueError(
                f"agent {self.name!r}: {n} tasks asked for, the study holds {len(specs)} "
                f"({repos} repositories x {per} tasks); raise tasks_per_repo to at least "
                f"{-(-n // repos)}")
        return specs[:n]

    def _granularity(self, task: TaskSpec) -> Granularity:
        g = self.granularity or task.params.get("granularity", "turn")
        if g not in ("turn", "tool_call"):
            raise ValueError(f"{task.task_id}: granularity must be 'turn' or 'tool_call', got {g!r}")
        return g

    @staticmethod
    def _write_state(ws: Path, lt: LatentTask, boundary: int, complete: bool) -> None:
        # one small write (no temp + rename): a simulated kill is cooperative, never mid-write
        path = Path(ws) / STATE_FILE
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as fh:
            fh.write(json.dumps({"task_id": lt.task_id, "boundary": boundary, "complete": complete}))

    @staticmethod
    def _read_state(ws: Path) -> dict[str, Any] | None:
        path = Path(ws) / STATE_FILE
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: corrupt simulator state: {exc}") from exc

    # -- protocol -----------------------------------------------------------------------
    def start(self, task: TaskSpec, workspace: Path, seed: int, clock: Clock) -> SimulatedRun:
        """The nominal run: the task's nominal trajectory, boundary by boundary."""
        lt = self.latent(task)
        gran = self._granularity(task)
        pos = set(int(p) for p in lt.positions(gran)[1:])
        bnum = {int(p): b for b, p in enumerate(lt.positions(gran)) if b}
        items: list[_Item] = []
        fact_names = _fact_names(lt)
        for e in lt.trajectory.events:
            fields_ = _event_fields(e)
            u = e.index // 2
            fact = fact_names.get(u) if e.index % 2 == 1 else None
            items.append(_Item(fields_, float(e.duration or 0.0), fact=fact))
            if e.index % 2 == 1 and (u + 1) in pos:
                items.append(_Item(boundary=bnum[u + 1]))
        self._frontier.pop(lt.task_id, None)
        return SimulatedRun(self, lt, items, workspace, clock, [], {}, 0, gran)

    def resume(
        self, task: TaskSpec, restore: RestorePoint, workspace: Path, seed: int, clock: Clock
    ) -> SimulatedRun:
        """A recovery: re-derive from the preserved state; durations add up to J(r, f)."""
        lt = self.latent(task)
        gran = self._granularity(task)
        pos = lt.positions(gran)
        B = len(pos) - 1
        r = int(restore.boundary)
        if not 0 <= r < B:
            raise ValueError(f"{task.task_id}: restore boundary {r} outside 0..{B - 1}")
        state = self._read_state(Path(workspace)) or self._read_state(restore.workspace)
        if state is not None and r > 0 and int(state.get("boundary", r)) != r:
            raise ValueError(
                f"{task.task_id}: restored workspace holds boundary {state.get('boundary')}, "
                f"restore point says {r}")
        f = int(self._frontier.get(lt.task_id, r + 1))
        f = min(max(f, r + 1), B)
        c = branch_costs(lt, [r], [f], [int(seed)], gran)
        items = _recovery_items(lt, gran, r, f, c)
        self._frontier[lt.task_id] = r + 1  # nothing else lost unless this run is killed
        return SimulatedRun(self, lt, items, workspace, clock, list(restore.transcript),
                            dict(restore.facts), r, gran)

    def verify(self, task: TaskSpec, workspace: Path) -> bool:
        """Verified iff the run in ``workspace`` completed and the task is solvable."""
        state = self._read_state(Path(workspace))
        return bool(state and state.get("complete") and self.latent(task).verified)

    def simulated_checkpoint_cost(self, task: TaskSpec, boundary: int, workspace: Path) -> tuple[float, int]:
        """(creation seconds, size bytes) of the checkpoint at ``boundary``."""
        lt = self.latent(task)
        creation, size, _ = lt.checkpoint_costs(self._granularity(task))
        _check_b(task, boundary, len(size) - 1, lo=1)
        return float(creation[boundary]), int(size[boundary])

    def simulated_restore_latency(self, task: TaskSpec, boundary: int) -> float:
        """Seconds to restore the checkpoint at ``boundary`` (0: the pristine workspace)."""
        lt = self.latent(task)
        _, _, restore = lt.checkpoint_costs(self._granularity(task))
        _check_b(task, boundary, len(restore) - 1, lo=0)
        return float(restore[boundary])


def _check_b(task: TaskSpec, b: int, B: int, lo: int) -> None:
    if not lo <= int(b) <= B:
        raise ValueError(f"{task.task_id}: boundary {b} outside {lo}..{B}")


def _fact_names(lt: LatentTask) -> dict[int, tuple[str, str]]:
    out = {}
    for k, u in enumerate(lt.fact_positions):
        e = lt.trajectory.events[2 * int(u) + 1]
        where = (e.paths_written or e.paths_read or ["?"])[0]
        out[int(u)] = (f"fact_{k}", f"observed in {where} (step {int(lt.step[u])})")
    return out


def _event_fields(e: Event) -> dict[str, Any]:
    return dict(
        kind=e.kind, step=e.step, input_tokens=e.input_tokens, cached_tokens=e.cached_tokens,
        output_tokens=e.output_tokens, command=e.command, argv=list(e.argv) if e.argv else None,
        exit_code=e.exit_code, paths_read=list(e.paths_read), paths_written=list(e.paths_written),
        bytes_written=e.bytes_written, tests_passed=e.tests_passed, tests_failed=e.tests_failed,
        safe_boundary=e.safe_boundary, boundary_kind=e.boundary_kind, turn_end=e.turn_end,
        text=e.text,
    )


def _recovery_items(lt: LatentTask, gran: Granularity, r: int, f: int, c: dict[str, np.ndarray]) -> list[_Item]:
    """Events of a recovery whose durations add up to ``c['raw_s']`` (one branch)."""
    fam = lt.family
    pos = lt.positions(gran)
    pr, pl = int(pos[r]), int(pos[f - 1])
    bnum = {int(p): b for b, p in enumerate(pos) if b}
    evs = lt.trajectory.events
    facts = _fact_names(lt)
    fpos = [int(u) for u in lt.fact_positions]
    step0 = int(lt.step[min(pr, lt.n_units - 1)])
    tok_rate = lt.tokens_per_s
    items: list[_Item] = []

    def model(seconds: float, step: int, text: str) -> None:
        tok = int(round(seconds * tok_rate))
        items.append(_Item(dict(kind=EventKind.MODEL_CALL, step=step, input_tokens=tok,
                                cached_tokens=int(round(tok * fam.cached_fraction)),
                                output_tokens=0, text=text), seconds))

    def tool(u: int, seconds: float, fact: tuple[str, str] | None = None, **over: Any) -> None:
        fields_ = _event_fields(evs[2 * u + 1])
        fields_.update(safe_boundary=False, boundary_kind=None, turn_end=False)
        fields_.update(over)
        items.append(_Item(fields_, seconds, fact=fact))

    def boundary_after(u: int) -> None:
        if (u + 1) in bnum:
            items.append(_Item(boundary=bnum[u + 1]))

    model(float(c["orient"][0]), step0, "re-orient from the preserved transcript")
    redo_total = float(lt.cum("redo")[pl] - lt.cum("redo")[pr])
    for u in range(pr, pl):
        if u in fpos:
            s = float(c["fact_s"][0, fpos.index(u)])
            model(0.5 * s, int(lt.step[u]), "rediscover")
            tool(u, 0.5 * s, fact=facts[u], bytes_written=evs[2 * u + 1].bytes_written)
        elif lt.redo_s[u] > 0:
            tool(u, float(c["redo"][0]) * float(lt.redo_s[u]) / redo_total)
        boundary_after(u)
    xs = float(c["explore"][0])
    model(0.6 * xs, int(lt.step[min(pl, lt.n_units - 1)]), "explore")
    u_x = min(pl, lt.n_units - 1)
    items.append(_Item(dict(kind=EventKind.COMMAND, step=int(lt.step[u_x]), argv=["git", "status"],
                            command="git status", paths_read=["."], exit_code=0), 0.4 * xs))
    test_code = KIND_CODE["test"]
    rem_units = [u for u in range(pl, lt.n_units) if not (fam.final_verification and lt.kind[u] == test_code)]
    rem_nom = float(sum(lt.model_s[u] + lt.tool_s[u] for u in rem_units))
    scale = float(c["remaining"][0]) / rem_nom if rem_nom > 0 else 0.0
    last_test = max((u for u in range(pl, lt.n_units) if lt.kind[u] == test_code), default=None)
    verify_done = False
    for u in range(pl, lt.n_units):
        if u in rem_units:
            model(float(lt.model_s[u]) * scale, int(lt.step[u]), "continue")
            tool(u, float(lt.tool_s[u]) * scale, fact=facts.get(u))
        if fam.final_verification and u == last_test:
            tool(u, float(c["verify"][0]))
            verify_done = True
        boundary_after(u)
    if fam.final_verification and not verify_done:
        u = lt.n_units - 1
        items.append(_Item(dict(kind=EventKind.TEST, step=int(lt.step[u]), argv=["python", "-m", "pytest", "-q"],
                                command="python -m pytest -q", paths_read=["tests"],
                                tests_passed=40, tests_failed=0 if lt.verified else 1,
                                exit_code=0 if lt.verified else 1), float(c["verify"][0])))
    if float(c["unverified"][0]) > 0:
        model(float(c["unverified"][0]), int(lt.step[-1]), "another attempt")
    # fix the model-call token split so usage tokens equal the fast path's tokens exactly
    want = int(c["tokens"][0])
    calls = [it for it in items if it.event and it.event["kind"] == EventKind.MODEL_CALL]
    got = sum(it.event["input_tokens"] for it in calls)
    if calls:
        calls[0].event["input_tokens"] += want - got
        calls[0].event["cached_tokens"] = int(round(calls[0].event["input_tokens"] * fam.cached_fraction))
    return items

