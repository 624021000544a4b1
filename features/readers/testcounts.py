"""Test-runner summaries: (passed, failed) from a command's output."""

from __future__ import annotations

import re

_PYTEST_SUMMARY = re.compile(r"^=*\s*(?P<body>(?:\d+ \w+(?:, )?)+)\s+in\s+[\d.]+s", re.M)
# the same summary at the text's start, and after a newline: a first character the regex
# engine can scan for (a "^" in multiline mode is tried at every position). A summary
# ends in "s", never in a newline, so the newline it starts with was not the end of the
# summary before it, and the matches are those of _PYTEST_SUMMARY (see _pytest_summaries)
_SUMMARY_AT_START = re.compile(r"=*\s*(?P<body>(?:\d+ \w+(?:, )?)+)\s+in\s+[\d.]+s")
_SUMMARY_AFTER_NL = re.compile(r"\n=*\s*(?P<body>(?:\d+ \w+(?:, )?)+)\s+in\s+[\d.]+s")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|error|xpassed|xfailed|skipped|deselected)")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s", re.M)
_UNITTEST_RESULT = re.compile(r"^(OK|FAILED)\b(?: \((?P<detail>[^)]*)\))?", re.M)
_JEST = re.compile(r"^\s*Tests:?\s+(?P<body>.*(?:\d+ total|\(\d+\)))\s*$", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CARGO = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed")
_MOCHA_PASS = re.compile(r"^\s*(\d+) passing\b", re.M)
_MOCHA_FAIL = re.compile(r"^\s*(\d+) failing\b", re.M)


def _pytest_summaries(output: str) -> list[re.Match[str]]:
    """``list(_PYTEST_SUMMARY.finditer(output))``'s summaries (their ``body`` groups are
    the same text), found by scanning for newlines."""
    first = _SUMMARY_AT_START.match(output)
    found = [first] if first is not None else []
    found += _SUMMARY_AFTER_NL.finditer(output, first.end() if first is not None else 0)
    return found


def parse_test_counts(output: str | None) -> tuple[int | None, int | None]:
    """(passed, failed) from a test runner's summary in ``output``, or (None, None).

    Recognises pytest (``== 3 passed, 1 failed in 0.5s ==``), unittest / Django
    (``Ran N tests`` + ``OK``/``FAILED (failures=a, errors=b)``), jest/vitest
    (``Tests: 1 failed, 5 passed, 6 total``; ``Tests  1 failed | 244 passed (245)``), cargo (``test result``) and mocha.
    The last summary in the output wins (pytest) or all are summed (cargo).
    Errors count as failures; skips are neither.
    """
    if not output:
        return None, None
    if "\x1b" in output:  # every ANSI sequence starts with ESC
        output = _ANSI.sub("", output)
    m = _pytest_summaries(output)
    if m:
        counts: dict[str, int] = {}
        for n, word in _COUNT.findall(m[-1].group("body")):
            counts[word.rstrip("s") if word.startswith("error") else word] = int(n)
        if any(k in counts for k in ("passed", "failed", "error")):
            return counts.get("passed", 0), counts.get("failed", 0) + counts.get("error", 0)
    ran = list(_UNITTEST_RAN.finditer(output))
    if ran:
        total = int(ran[-1].group(1))
        res = [r for r in _UNITTEST_RESULT.finditer(output) if r.start() > ran[-1].start()]
        if res:
            detail = res[0].group("detail") or ""
            kv = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", detail)}
            failed = kv.get("failures", 0) + kv.get("errors", 0) + kv.get(
                "unexpected_successes", 0)
            skipped = kv.get("skipped", 0) + kv.get("expected_failures", 0)
            return max(total - failed - skipped, 0), failed
    j = list(_JEST.finditer(output))
    if j:
        body = j[-1].group("body")
        p = re.search(r"(\d+) passed", body)
        f = re.search(r"(\d+) failed", body)
        return (int(p.group(1)) if p else 0), (int(f.group(1)) if f else 0)
    c = _CARGO.findall(output)
    if c:
        return sum(int(a) for a, _ in c), sum(int(b) for _, b in c)
    mp, mf = _MOCHA_PASS.findall(output), _MOCHA_FAIL.findall(output)
    if mp or mf:
        return (int(mp[-1]) if mp else 0), (int(mf[-1]) if mf else 0)
    return None, None

