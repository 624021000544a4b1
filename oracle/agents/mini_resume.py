"""mini-swe-agent's resume entry point (it has none of its own), run with ITS interpreter.

``<mini venv>/bin/python mini_resume.py TRAJECTORY <mini options...>`` is the ``mini`` command
line (:mod:`minisweagent.run.mini`: the same options, configuration, model, environment and
agent class) with one change: the agent's first messages are the ``messages`` of the
preserved ``TRAJECTORY`` (a ``.traj.json`` that mini-swe-agent wrote), followed by the task
(``-t``) as a new user message, instead of the rendered system and instance templates; its
call count and cost continue from the trajectory's ``info.model_stats``; the history is not
printed to the console again (rendering it took seconds). The run then goes on
in mini-swe-agent's own loop (``DefaultAgent.run``) and writes the whole conversation,
history included, to ``-o``.

Standard library and mini-swe-agent only (imported inside :func:`main`): no project module
imports this file, whose interpreter lacks the project's dependencies;
:class:`oracle.agents.runtimes.MiniSweAgent` names its path.
"""

from __future__ import annotations

import json
import os
import sys

# run as a script, this file's folder (the project's oracle/ package) heads sys.path; none of
# its modules may shadow what mini-swe-agent imports
if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]


def load(path: str) -> tuple[list[dict], dict]:
    """The messages and model stats of a mini-swe-agent trajectory; exits with one line if
    the file is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        messages = doc["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise TypeError("messages is not a list of objects")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{path}: not a mini-swe-agent trajectory: {exc}") from None
    stats = (doc.get("info") or {}).get("model_stats") or {}
    return messages, stats if isinstance(stats, dict) else {}


def resumable(agent_class: type, messages: list[dict], stats: dict) -> type:
    """``agent_class`` whose run starts from ``messages`` (then the task as a user message)."""

    class Resumed(agent_class):  # type: ignore[misc, valid-type]
        restore: list[dict] | None = messages

        def add_messages(self, *new: dict) -> list[dict]:
            if self.restore is None:
                return super().add_messages(*new)
            # the first call of run(): the rendered system and instance messages
            history, self.restore = self.restore, None
            self.n_calls = int(stats.get("api_calls", 0) or 0)
            self.cost = float(stats.get("instance_cost", 0.0) or 0.0)
            task = self.extra_template_vars.get("task", "")
            self.messages.extend(history)  # as DefaultAgent.add_messages, not printed again
            return [*history, *super().add_messages(self.model.format_message(role="user",
                                                                              content=task))]

    Resumed.__name__ = Resumed.__qualname__ = agent_class.__name__
    return Resumed


def main(argv: list[str]) -> None:
    """Resume the trajectory ``argv[1]`` with the ``mini`` options ``argv[2:]``."""
    if len(argv) < 2 or argv[1].startswith("-"):
        raise SystemExit("usage: python mini_resume.py TRAJECTORY [mini options, -t TASK]")
    messages, stats = load(argv[1])
    from minisweagent.run import mini

    build = mini.get_agent

    def get_agent(*args, **kwargs):  # type: ignore[no-untyped-def]
        agent = build(*args, **kwargs)
        agent.__class__ = resumable(type(agent), messages, stats)
        return agent

    mini.get_agent = get_agent
    sys.argv = [argv[0], *argv[2:]]
    mini.app()


if __name__ == "__main__":
    main(sys.argv)
