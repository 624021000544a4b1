"""The readers' JSON parse is msgspec with cheap checks for what msgspec does not refuse
(duplicate keys, nesting deeper than the limit), the stdlib strict parse where a check
fails (issue 14, item 6). These tests feed every strict case through that fast path and
compare what comes out with the stdlib strict parse the readers used before: the same
document (types, key order, values), or the same refusal naming the line and field."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from features.readers import ReadLimits, TrajectoryFormatError, read_limits
from features.readers.fields import Loc
from features.readers.strict_json import (
    _bulk_jsonl,
    _bulk_jsonl_bytes,
    iter_jsonl,
    jsonl_records,
    load_embedded_json,
    load_json,
    load_json_files,
    parse_json_line,
)

SRC = Path("log.jsonl")


class Dup(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise Dup
    return d


def _nan(name: str) -> Any:
    raise Dup


REFERENCE = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_nan)


def same(a: Any, b: Any) -> bool:
    """Equal documents down to types, key order and the sign of zero."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is float:
        return a == b and math.copysign(1, a) == math.copysign(1, b) or (a != a and b != b)
    return bool(a == b)


# what colon counting must not be fooled by: a dropped value holding colons, keys spelled
# with escapes, colons written as \u003a, duplicates deep inside, many colons in strings
DUPLICATES = [
    ('{"a": 1, "a": 2}', "line 1: field a: duplicate key"),
    ('{"a": "x:y:z", "a": "w"}', "field a: duplicate key"),
    ('{"a": "w", "a": "x:y:z"}', "field a: duplicate key"),
    ('{"a": 1, "\\u0061": 2}', "field a: duplicate key"),
    ('{"a:": 1, "a\\u003a": 2}', "field a:: duplicate key"),
    ('{"t": "12:00:00", "k": {"u": "http://x:80", "u": "ftp://y"}}', "field k.u: duplicate key"),
    ('{"x": [{"a": 1}, {"b": {"c": 1, "c": {"d": ":"}}}]}', r"field x[1].b.c: duplicate key"),
    ('{"a": {"b": 1}, "a": {}}', "field a: duplicate key"),
    ('{"a": ":", "b": "\\u003a", "b": ":"}', "field b: duplicate key"),
    ('{"a": 1, "a": 2, "b": "\\u003a"}', "field a: duplicate key"),  # the counts agree
    ('{"a": 1, "a": 2, "b": "\\u003A"}', "field a: duplicate key"),
]


@pytest.mark.parametrize("text, message", DUPLICATES)
def test_duplicate_keys_are_refused_through_the_fast_path(text: str, message: str) -> None:
    with pytest.raises(TrajectoryFormatError) as err:
        parse_json_line(text, SRC, 1)
    assert str(err.value).startswith(f"{SRC}: line 1: ") and message in str(err.value)
    assert "\n" not in str(err.value)
    p = SRC.with_name("doc.json")
    with pytest.raises(TrajectoryFormatError, match="duplicate key"):
        load_json(p, text)
    with pytest.raises(TrajectoryFormatError, match=r"field args: its JSON text holds .*"
                       "duplicate key"):
        load_embedded_json(text, Loc(p, 3, "args"))


ACCEPTED = [
    '{"a": "x:y", "b": "\\u003a", "c": {"d": ":"}}',  # escaped colons, no duplicate
    '{"n": 18446744073709551616, "m": -9223372036854775809, "k": 9223372036854775807}',
    '{"x": 1e400, "y": -1e400, "z": 1e-400, "w": -0.0, "v": -0}',
    '{"s": "\\ud83d\\ude00", "t": "\\\\ud800", "e": ""}',
    '{"a": {}, "b": [], "c": [[], {}], "d": null, "e": true, "f": false}',
    '  {"a": 1}  \r',
    '{"": 1, " ": 2, "a": "[{[{"}',
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_accepted_documents_are_the_stdlib_ones(text: str) -> None:
    """Big integers stay ints (not floats), 1e400 is inf as json reads it (the readers then
    refuse it per field), escapes and signs are kept."""
    ref = REFERENCE.decode(text)
    assert same(parse_json_line(text, SRC, 1), ref)
    assert same(load_embedded_json(text, Loc(SRC, 1)), ref)


REFUSED = [
    ('{"a": NaN}', "line 1: field a: NaN or Infinity"),
    ('{"a": [Infinity]}', r"line 1: field a\[0\]: NaN or Infinity"),
    ('{"a": -Infinity}', "line 1: field a: NaN or Infinity"),
    ('{"s": "\\ud800"}', "line 1: field s: a lone UTF-16 surrogate"),
    ('{"s": ["\\udc00x"]}', r"line 1: field s\[0\]: a lone UTF-16 surrogate"),
    ('{"a": ' + "[" * 129 + "]" * 129 + "}", r"line 1: field a(\[0\])+: JSON nested deeper "
     "than 128 levels"),
    ('{"a": ' + "[" * 2000 + "]" * 2000 + "}", r"line 1: field a(\[0\])+: JSON nested "
     "deeper than 128 levels"),
    ('{"a": 1', "line 1: not valid JSON"),
    ('{"a": 01}', "line 1: not valid JSON"),
    ('\ufeff{"a": 1}', "line 1: not valid JSON"),
    ('{"a": "\t"}', "line 1: not valid JSON"),
    ("[1, 2]", "line 1: expected a JSON object, got list"),
]


@pytest.mark.parametrize("text, message", REFUSED)
def test_refusals_name_line_and_field(text: str, message: str) -> None:
    with pytest.raises(TrajectoryFormatError) as err:
        parse_json_line(text, SRC, 1)
    assert re.match(f"{SRC}: {message}", str(err.value)) and "\n" not in str(err.value)


def test_depth_limit_counts_brackets_not_only_in_strings() -> None:
    """Many brackets inside strings make the walk run; it finds the document shallow."""
    text = json.dumps({"s": "[" * 500, "a": [[[1]]]})
    assert parse_json_line(text, SRC, 1) == json.loads(text)
    with read_limits(ReadLimits(max_depth=3)):
        with pytest.raises(TrajectoryFormatError, match=r"field a\[0\]\[0\]: JSON nested deeper "
                           "than 3 levels"):
            parse_json_line(text, SRC, 1)
        assert parse_json_line('{"a": [[1]], "s": "[[[[[["}', SRC, 1) == {
            "a": [[1]], "s": "[[[[[["}


scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(alphabet=st.sampled_from(list('ab:"\\{}[] \u00e9\U0001f600\n')), max_size=6))
keys = st.text(alphabet=st.sampled_from(list("ab:")), max_size=3)
documents = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4)
                         | st.lists(st.tuples(keys, kids), max_size=4), max_leaves=20)


def _render(x: Any, escape: bool, ascii_: bool) -> str:
    """JSON text of ``x``, where a list of (key, value) pairs is an object written with
    every pair (so keys may repeat); colons in strings written as ``\\u003a`` and
    non-ASCII as ``\\u`` escapes (surrogate pairs included) when asked."""
    if isinstance(x, list) and x and all(isinstance(p, tuple) for p in x):
        return "{" + ", ".join(f"{_render(k, escape, ascii_)}: {_render(v, escape, ascii_)}"
                               for k, v in x) + "}"
    if isinstance(x, list):
        return "[" + ", ".join(_render(v, escape, ascii_) for v in x) + "]"
    s = json.dumps(x, ensure_ascii=ascii_)
    return s.replace(":", "\\u003a") if escape and isinstance(x, str) else s


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents, escape=st.booleans(), ascii_=st.booleans())
def test_fast_path_agrees_with_the_stdlib_strict_parse(doc: Any, escape: bool,
                                                       ascii_: bool) -> None:
    text = '{"d": ' + _render(doc, escape, ascii_) + "}"
    try:
        ref = REFERENCE.decode(text)
    except Dup:
        with pytest.raises(TrajectoryFormatError, match="duplicate key"):
            parse_json_line(text, SRC, 1)
        return
    assert same(parse_json_line(text, SRC, 1), ref)


def _records_or_error(fn: Any, text: str) -> Any:
    try:
        return [(n, o) for n, o in fn(text)]
    except TrajectoryFormatError as exc:
        return str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(documents, min_size=1, max_size=5), escape=st.booleans(),
       ascii_=st.booleans(), deep=st.sampled_from([None, 0, -1]), tail=st.sampled_from(
           ["", "\n", "\n\n", "\n \r\n"]))
def test_a_whole_file_parses_as_line_by_line(docs: list[Any], escape: bool, ascii_: bool,
                                              deep: int | None, tail: str) -> None:
    """The whole-file parse (the counts made once for all lines: colons and brackets per
    line from one pass over an ASCII text) gives what the line-by-line parse gives: the same
    objects and line numbers, or the same first error (a duplicate, a line nested too deep
    among shallow ones, a line with many colons and brackets that is shallow)."""
    lines = ['{"d": ' + _render(d, escape, ascii_) + "}" for d in docs]
    lines.append('{"k": [' + ", ".join(['{"a": 1, "b": [2]}'] * 70) + "]}")  # shallow
    if deep is not None:
        lines.insert(deep % len(lines), '{"a": ' + "[" * 129 + "]" * 129 + "}")
    text = "\n".join(lines) + tail
    fast = _records_or_error(lambda t: jsonl_records(SRC, t), text)
    slow = _records_or_error(lambda t: ((ln.lineno, ln.obj) for ln in iter_jsonl(SRC, t)), text)
    by_bytes = _bulk_jsonl_bytes(text.encode(), 128)  # the file's bytes: None or the same
    if isinstance(slow, str):
        assert fast == slow and by_bytes is None
    else:
        assert not isinstance(fast, str), fast
        assert [n for n, _ in fast] == [n for n, _ in slow]
        assert all(same(a, b) for (_, a), (_, b) in zip(fast, slow, strict=True))
        # no byte-order mark, no Unicode blank line here: the bytes decide as the text does
        assert (by_bytes is None) == (_bulk_jsonl(text, 128) is None)
        if by_bytes is not None:
            assert all(same(a, b) for a, (_, b) in zip(by_bytes, slow, strict=True))


def test_the_whole_file_marks_do_not_depend_on_how_the_text_is_cut(monkeypatch) -> None:
    """The ASCII text's marks are taken 16 MiB at a time; cut anywhere, the same answer."""
    from features.readers import strict_json as common

    shallow = '{"k": [' + ", ".join(['{"a": 1}'] * 80) + "]}"
    deep = '{"a": ' + "[" * 129 + "]" * 129 + "}"
    ok = "\n".join([shallow, '{"b": ":"}'] * 3) + "\n"
    bad = "\n".join([shallow, deep, shallow]) + "\n"
    want_ok = common._bulk_jsonl(ok, 128)
    assert want_ok is not None and common._bulk_jsonl(bad, 128) is None
    for chunk in (1, 5, 64, 1000):
        monkeypatch.setattr(common, "_CHUNK", chunk)
        assert common._bulk_jsonl(ok, 128) == want_ok
        assert common._bulk_jsonl(bad, 128) is None


def test_the_bytes_are_checked_piece_by_piece_with_the_answer_of_the_whole(monkeypatch) -> None:
    """The bytes form takes a file a piece of whole lines at a time; cut anywhere, a
    duplicate, a deep line, an escaped colon or a blank line in any piece refuses the
    file, and a good file gives the same documents (trailing blank lines included)."""
    from features.readers import strict_json as common

    shallow = '{"k": [' + ", ".join(['{"a": 1}'] * 80) + "]}"
    good = [shallow, '{"b": ":"}', '{"c": "\u2713 x:y"}', shallow, '{"d": [1, {"e": 2}]}']
    ok = ("\n".join(good) + "\n\n \n").encode()
    bads = [("\n".join(good[:k] + [bad] + good[k:]) + "\n").encode()
            for bad in ('{"a": 1, "a": 2}', '{"a": ' + "[" * 129 + "]" * 129 + "}",
                        '{"a": "\\u003a", "a": 1}', "", "  ", "[1]")
            for k in (0, 2, len(good)) if bad.strip() or k < len(good)]  # (a blank tail: ok)
    want_ok = [json.loads(s) for s in good]
    for piece in (1, 5, 64, 1000, 1 << 18):
        monkeypatch.setattr(common, "_PIECE", piece)
        assert common._bulk_jsonl_bytes(ok, 128) == want_ok, piece
        for bad in bads:
            assert common._bulk_jsonl_bytes(bad, 128) is None, (piece, bad[:60])


def test_a_file_read_by_its_bytes_reads_as_its_text(tmp_path: Path) -> None:
    """Inside a read, a JSONL file is parsed from its bytes; where they might disagree with
    the decoded text (a byte-order mark, a trailing line of Unicode blank space), the text
    decides, as before."""
    from features.readers.files import reading

    body = '{"a": "\u2713 \U0001f600"}\n{"b": [1, {"c": ":"}]}\n'.encode()
    for raw, by_bytes in ((body, True), (b"\xef\xbb\xbf" + body, False),
                          (body + "\u00a0\n".encode(), False)):
        f = tmp_path / "log.jsonl"
        f.write_bytes(raw)
        with reading(f):
            got = list(jsonl_records(f))
        assert got == [(1, {"a": "\u2713 \U0001f600"}), (2, {"b": [1, {"c": ":"}]})]
        assert (_bulk_jsonl_bytes(raw, 128) is not None) is by_bytes


# -- many small files at once (a conversation directory) -------------------------------

def _files(tmp_path: Path, texts: list[str | bytes]) -> list[str]:
    out = []
    for i, t in enumerate(texts):
        p = tmp_path / f"f{i}.json"
        p.write_bytes(t if isinstance(t, bytes) else t.encode())
        out.append(str(p))
    return out


def test_many_files_load_as_load_json_loads_each(tmp_path: Path) -> None:
    texts = ['{"a": 1, "t": "12:00:00"}', '[1, {"b": [2, 3]}]', '{"x": "\\u00e9 \u00e9"}',
             "[" + ", ".join(['{"k": [1]}'] * 200) + "]"]  # many brackets, shallow
    paths = _files(tmp_path, texts)
    docs = load_json_files(paths, 1 << 20)
    assert docs is not None and len(docs) == 4
    assert all(same(d, load_json(Path(p))) for d, p in zip(docs, paths, strict=True))
    assert load_json_files([], 1 << 20) == []


@pytest.mark.parametrize("bad", [
    '{"a": 1, "a": 2}',                      # a duplicate key (colons counted over all files)
    '{"a": ":", "a": "x"}',
    '{"a": 1, "a": 2, "b": "\\u003a"}',      # a duplicate the colon counts miss (escaped)
    b"\xef\xbb\xbf{}",                       # a byte-order mark
    " {}",                                   # leading blank
    "",                                      # empty
    '{"a": NaN}',                            # msgspec refuses: invalid strict JSON
    b'{"a": "\xff"}',                        # not UTF-8
    '{"a": "x\\u0000"}\x00',                 # a NUL byte
    b'{"a": "x\x00y"}',                      # a NUL byte in a string (msgspec refuses it)
    "[" * 200 + "]" * 200,                   # deeper than the limit
    '"a scalar"',
])
def test_any_doubt_sends_the_files_to_the_one_by_one_path(tmp_path: Path, bad: str | bytes
                                                          ) -> None:
    paths = _files(tmp_path, ['{"ok": "a:b"}', bad, '{"ok": 2}'])
    assert load_json_files(paths, 1 << 20) is None


def test_many_files_refuse_other_than_regular_files_and_the_size_limit(tmp_path: Path) -> None:
    import os
    paths = _files(tmp_path, ['{"a": 1}', '{"b": 2}'])
    assert load_json_files(paths, 1 << 20) is not None
    assert load_json_files(paths, 15) is None               # 16 bytes together
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert load_json_files([*paths, str(fifo)], 1 << 20) is None   # refused, not waited on
    assert load_json_files([*paths, str(tmp_path / "gone.json")], 1 << 20) is None


def test_a_jsonl_log_is_read_from_its_bytes_and_decoded_only_when_they_are_refused(
        tmp_path: Path, monkeypatch) -> None:
    """Detection takes a JSONL log's first line from its bytes and the reader parses the
    bytes, so a clean log's text is never decoded whole (a copy of the file, 50 MB for a
    50 MB log); a log whose bytes are refused is decoded and words the error as before
    (here: not UTF-8 on line 3, found by the text's decoding)."""
    from features.readers import files as common
    from features.readers import read_trajectory

    decoded: list[int] = []
    real = common.decode_log
    monkeypatch.setattr(common, "decode_log", lambda p, raw: decoded.append(len(raw))
                        or real(p, raw))
    lines = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
             {"type": "item.completed", "item": {"id": "i0", "type": "agent_message",
                                                 "text": "\u2713 done"}},
             {"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}}]
    body = "\n".join(json.dumps(o, ensure_ascii=False) for o in lines).encode() + b"\n"
    log = tmp_path / "exec.jsonl"
    log.write_bytes(body)
    assert [e.text for e in read_trajectory(log).events][0] == "\u2713 done"
    assert decoded == []
    bad = body.replace(b'"i0"', b'"i\xff0"')
    log.write_bytes(bad)
    with pytest.raises(TrajectoryFormatError, match=r"exec\.jsonl: line 3: not UTF-8 text"):
        read_trajectory(log)
    assert decoded == [len(bad)]
