"""Provenance graph: edges and families for hand-written command sequences."""

from __future__ import annotations

from features.graph import DEFAULT_FAMILIES, EdgeFamily, ProvenanceGraph, build_graph, event_effects
from features.schema import Event, EventKind


def cmd(i: int, command: str, step: int = 1, **kw: object) -> Event:
    return Event(index=i, kind=kw.pop("kind", EventKind.COMMAND), step=step, command=command, **kw)  # type: ignore[arg-type]


def edges(pg: ProvenanceGraph) -> set[tuple[object, object, str]]:
    return {(u, v, d["family"]) for u, v, d in pg.graph.edges(data=True)}


def test_write_then_read_links_latest_version() -> None:
    pg = build_graph([
        cmd(0, "cat > a.py <<EOF\nx = 1\nEOF"),
        cmd(1, "sed -i 's/1/2/' a.py"),
        cmd(2, "cat a.py", step=2),
    ])
    e = edges(pg)
    assert (("ev", 0), ("fv", "a.py", 1), "write") in e
    assert (("fv", "a.py", 1), ("ev", 1), "read") in e  # sed -i reads the old version
    assert (("ev", 1), ("fv", "a.py", 2), "write") in e
    assert (("fv", "a.py", 2), ("ev", 2), "read") in e  # the latest version at read time
    assert (("fv", "a.py", 1), ("ev", 2), "read") not in e


def test_pristine_version_on_first_read() -> None:
    pg = build_graph([cmd(0, "bash -lc 'head -n 5 README.md'")])
    assert (("fv", "README.md", 0), ("ev", 0), "read") in edges(pg)
    assert pg.graph.nodes[("fv", "README.md", 0)]["epoch"] is None


def test_pipes_redirections_and_and_lists() -> None:
    pg = build_graph([
        cmd(0, "echo a > x.txt && echo b > y.txt"),
        cmd(1, "cat x.txt | tee z.txt; cat < y.txt >> log.txt", step=2),
    ])
    e = edges(pg)
    assert {(("fv", "x.txt", 1), ("ev", 1), "read"), (("fv", "y.txt", 1), ("ev", 1), "read")} <= e
    assert {(("ev", 1), ("fv", "z.txt", 1), "write"), (("ev", 1), ("fv", "log.txt", 1), "write")} <= e


def test_cp_mv_rm_versions_and_liveness() -> None:
    pg = build_graph([
        cmd(0, "echo a > a.py"),
        cmd(1, "cp a.py b.py", step=2),
        cmd(2, "mv b.py c.py", step=3),
        cmd(3, "rm a.py", step=4),
    ])
    e = edges(pg)
    assert (("fv", "a.py", 1), ("ev", 1), "read") in e
    assert (("ev", 1), ("fv", "b.py", 1), "write") in e
    assert (("ev", 2), ("fv", "b.py", 2), "write") in e  # mv: tombstone of the source
    assert pg.graph.nodes[("fv", "b.py", 2)]["deleted"] is True
    assert (("ev", 2), ("fv", "c.py", 1), "write") in e
    assert (("ev", 3), ("fv", "a.py", 2), "write") in e
    assert set(pg.live) == {"c.py"}


def test_git_apply_checkout_and_apply_patch() -> None:
    pg = build_graph([
        cmd(0, "git apply <<'EOF'\n--- a/m.py\n+++ b/m.py\n@@\n-a\n+b\nEOF"),
        cmd(1, "git checkout -- m.py", step=2),
        Event(index=2, kind=EventKind.FILE_CHANGE, step=3,
              argv=["apply_patch", "*** Begin Patch\n*** Add File: n.py\n+x\n*** End Patch"]),
    ])
    e = edges(pg)
    assert (("ev", 0), ("fv", "m.py", 1), "write") in e
    assert (("ev", 1), ("fv", "m.py", 2), "write") in e
    assert (("ev", 2), ("fv", "n.py", 1), "write") in e


def test_build_io_reads_every_live_written_version() -> None:
    pg = build_graph([
        cmd(0, "echo a > a.py"),
        cmd(1, "echo b > b.py", step=2),
        cmd(2, "rm b.py", step=3),
        cmd(3, "python -m pytest -q", step=4, kind=EventKind.TEST),
    ])
    e = edges(pg)
    assert (("fv", "a.py", 1), ("ev", 3), "build_io") in e
    assert not any(v == ("ev", 3) and u[1] == "b.py" for u, v, _ in e)  # deleted: not live
    assert pg.edge_counts["build_io"] == 1


def test_tool_result_rule_within_step_only() -> None:
    events = [
        Event(index=0, kind=EventKind.MODEL_CALL, step=1),
        cmd(1, "ls", step=1),
        Event(index=2, kind=EventKind.MESSAGE, step=1, text="done"),
        Event(index=3, kind=EventKind.MODEL_CALL, step=1),
        Event(index=4, kind=EventKind.MODEL_CALL, step=2),
    ]
    pg = build_graph(events)
    tr = {(u, v) for u, v, f in edges(pg) if f == "tool_result"}
    assert tr == {(("ev", 0), ("ev", 1)), (("ev", 1), ("ev", 3))}  # message: neither side


def test_uninterpreted_edge_and_ablation() -> None:
    events = [
        cmd(0, "python - <<'PY'\nimport os\nPY"),
        cmd(1, "cat out.txt", step=2),
        cmd(2, "ls", step=3),
    ]
    pg = build_graph(events)
    assert (("ev", 0), ("ev", 1), "uninterpreted") in edges(pg)
    assert pg.edge_counts["uninterpreted"] == 1
    assert pg.graph.nodes[("ev", 0)]["interpreted"] is False
    ablated = build_graph(events, DEFAULT_FAMILIES - {EdgeFamily.UNINTERPRETED})
    assert ablated.edge_counts["uninterpreted"] == 0
    assert not any(f == "uninterpreted" for *_, f in edges(ablated))
    # the other families are unchanged by the ablation
    for fam in ("read", "write", "build_io", "tool_result"):
        assert ablated.edge_counts[fam] == pg.edge_counts[fam]


def test_edge_counts_by_family_match_graph() -> None:
    events = [
        Event(index=0, kind=EventKind.MODEL_CALL, step=1),
        cmd(1, "echo a > a.py", step=1),
        Event(index=2, kind=EventKind.MODEL_CALL, step=1),
        cmd(3, "pytest -q", step=1, kind=EventKind.TEST),
        cmd(4, "frobnicate", step=2),
        cmd(5, "cat a.py", step=2),
    ]
    pg = build_graph(events)
    counts = pg.edge_counts_by_family()
    assert set(counts) == {f.value for f in EdgeFamily}
    from_graph: dict[str, int] = {}
    for *_, f in edges(pg):
        from_graph[f] = from_graph.get(f, 0) + 1
    assert {k: v for k, v in counts.items() if v} == from_graph
    assert counts["nl_inferred"] == 0
    assert counts["write"] == 1 and counts["build_io"] == 1 and counts["uninterpreted"] == 1


def test_reader_paths_take_precedence_and_root_is_stripped() -> None:
    e = Event(index=0, kind=EventKind.FILE_CHANGE, paths_written=["/repo/src/a.py"],
              extra={"cwd": "/repo"})
    pg = ProvenanceGraph()
    pg.add_event(e)
    assert "src/a.py" in pg.live
    # command says nothing about b.py, the reader's paths are used
    e2 = Event(index=1, kind=EventKind.COMMAND, command="frobnicate", paths_read=["src/a.py"])
    eff = event_effects(e2, "/repo")
    assert eff.reads == ("src/a.py",) and eff.interpreted


def test_directory_read_expands_to_live_files() -> None:
    pg = build_graph([
        cmd(0, "echo a > src/a.py && echo b > src/b.py && echo c > other.py"),
        cmd(1, "grep -rn foo src", step=2),
    ])
    readers = {u[1] for u, v, f in edges(pg) if v == ("ev", 1) and f == "read"}
    assert readers == {"src/a.py", "src/b.py"}


def test_epoch_bitsets_follow_edges() -> None:
    pg = ProvenanceGraph()
    pg.add_event(cmd(0, "echo a > a.py"))
    pg.new_epoch()
    r = pg.add_event(cmd(1, "cat a.py", step=2))
    assert pg.descends_from_epoch(r.node, 0) and not pg.descends_from_epoch(r.node, 1)
    r2 = pg.add_event(cmd(2, "cat a.py", step=2))  # tool_result from event 1 (epoch 1)
    assert pg.descends_from_epoch(r2.node, 1)


def test_command_string_wins_over_split_argv() -> None:
    """Readers often store argv = shlex.split(command), which loses pipes and redirections."""
    import shlex

    command = "nl -ba a.py | sed -n '1,5p' > out.txt && rm old.py"
    e = Event(index=0, kind=EventKind.COMMAND, command=command, argv=shlex.split(command))
    eff = event_effects(e)
    assert eff.reads == ("a.py",) and eff.writes == ("out.txt",) and eff.deletes == ("old.py",)
    only_argv = Event(index=0, kind=EventKind.COMMAND, argv=["bash", "-lc", "cat a.py > b.py"])
    assert event_effects(only_argv).writes == ("b.py",)


def test_failed_edit_writes_nothing():
    """A rejected apply_patch (is_error, no paths) must not create a file version."""
    from features.graph import event_effects
    from features.schema import Event

    patch = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch\nEOF"
    ok = Event(0, "file_change", command=patch)
    refused = Event(1, "file_change", command=patch, is_error=True)
    assert event_effects(ok).writes
    assert event_effects(refused).writes == ()
