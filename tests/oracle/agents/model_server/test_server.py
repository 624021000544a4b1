"""The loopback model server: binds loopback only, ends itself, audits every exchange with
digests, emulates latency when asked, runs as a process, and proxies to a real endpoint."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zstandard

from oracle.agents.model_server import (
    Brain,
    BrainError,
    LatencyModel,
    ModelRequest,
    ModelServer,
    Plan,
    ProxyBrain,
    ScriptedBrain,
    ServerConfig,
    Step,
    StepBrain,
    check_loopback,
)
from oracle.store.audit import AuditCorruptError, AuditLog

PLAN = Plan.from_json([{"shell": "printf 'hi\\n' > hi.txt"}, {"finish": "done"}])
REPO = Path(__file__).resolve().parents[4]


def _request(url: str, method: str, path: str, body: bytes | dict | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=30)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    conn.request(method, path, body=data, headers={"content-type": "application/json",
                                                   **(headers or {})})
    resp = conn.getresponse()
    out = (resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    conn.close()
    return out


def _responses_body(prompt: str = "make hi.txt", **kw: Any) -> dict:
    return {"model": "loopback", "stream": True, "prompt_cache_key": "t1",
            "tools": [{"type": "function", "name": "exec_command"}],
            "input": [{"type": "message", "role": "user", "content": prompt}], **kw}


def _messages_body() -> dict:
    return {"model": "loopback", "stream": True, "max_tokens": 100,
            "messages": [{"role": "user", "content": "make hi.txt"}]}


def _chat_body() -> dict:
    return {"model": "loopback", "messages": [{"role": "user", "content": "make hi.txt"}],
            "tools": [{"type": "function", "function": {"name": "bash"}}]}


# ----------------------------------------------------------------------------- loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.com", "10.0.0.1"])
def test_refuses_any_non_loopback_address(host: str) -> None:
    with pytest.raises(ValueError, match="loopback") as err:
        ModelServer(ScriptedBrain(PLAN), ServerConfig(host=host))
    assert "\n" not in str(err.value) and repr(host) in str(err.value)


def test_loopback_addresses_are_accepted() -> None:
    assert check_loopback("localhost") == "127.0.0.1"
    assert check_loopback("127.0.0.2") == "127.0.0.2"
    with ModelServer(ScriptedBrain(PLAN), ServerConfig(host="127.0.0.1")) as srv:
        assert srv.host == "127.0.0.1" and srv.url == f"http://127.0.0.1:{srv.port}"


def test_ipv6_loopback_when_the_machine_has_it() -> None:
    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    with ModelServer(ScriptedBrain(PLAN), ServerConfig(host="::1")) as srv:
        assert srv.url.startswith("http://[::1]:")
        status, _, _ = _request(srv.url, "HEAD", "/")
        assert status == 200


@pytest.mark.parametrize("kw, msg", [({"port": 70000}, "port"), ({"max_requests": 0},
                                     "max_requests"), ({"idle_timeout_s": 0}, "idle")])
def test_bad_config_is_one_line(kw: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        ServerConfig(**kw)


# ----------------------------------------------------------------------------- exchanges


def test_every_exchange_is_audited_with_digests(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    with ModelServer(ScriptedBrain(PLAN), ServerConfig(audit=audit, run_id="r1")) as srv:
        sent, got = [], []
        for path, body in [("/v1/responses", _responses_body()),
                           ("/v1/messages?beta=true", _messages_body()),
                           ("/v1/chat/completions", _chat_body())]:
            raw = json.dumps(body).encode()
            status, headers, out = _request(srv.url, "POST", path, raw)
            assert status == 200
            sent.append(raw)
            got.append(out)
        assert _request(srv.url, "HEAD", "/")[0] == 200
        status, _, models = _request(srv.url, "GET", "/v1/models")
        assert status == 200 and json.loads(models)["data"][0]["id"] == "loopback"
        assert _request(srv.url, "GET", "/nope")[0] == 404
        assert srv.requests_served == 3
    records = AuditLog(audit).records()
    assert records == srv.exchanges
    assert [r["key"] for r in records] == [f"r1/{i:06d}" for i in range(6)]
    assert [r.get("protocol") for r in records] == ["openai-responses", "anthropic-messages",
                                                    "openai-chat", None, None, None]
    for r, raw, out in zip(records, sent, got, strict=False):
        assert r["request_sha256"] == hashlib.sha256(raw).hexdigest()
        assert r["response_sha256"] == hashlib.sha256(out).hexdigest()
        assert r["step"] == 0 and r["decision"] == "turn0/step0" and r["status"] == 200
        assert len(r["transcript_sha256"]) == 64 and r["output_tokens"] > 0
        assert "emulated_latency_s" not in r  # latency emulation is off by default
    assert records[0]["conversation"] == "t1"
    assert [r["status"] for r in records[3:]] == [200, 200, 404]
    # each line carries its own checksum: a changed record is caught on reading
    lines = audit.read_text().splitlines()
    lines[1] = lines[1].replace('"status":200', '"status":201')
    audit.write_text("\n".join(lines) + "\n")
    with pytest.raises(AuditCorruptError, match=r"audit.jsonl:2: corrupt audit record"):
        AuditLog(audit).records()


def test_a_reused_run_id_continues_its_numbering(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    for _ in range(2):
        with ModelServer(ScriptedBrain(PLAN), ServerConfig(audit=audit, run_id="same")) as srv:
            _request(srv.url, "HEAD", "/")
    assert [r["key"] for r in AuditLog(audit).records()] == ["same/000000", "same/000001"]


def test_bad_requests_get_400_naming_the_problem() -> None:
    with ModelServer(ScriptedBrain(PLAN)) as srv:
        status, _, out = _request(srv.url, "POST", "/v1/responses", b"{not json")
        assert status == 400 and "request body: not JSON" in json.loads(out)["error"]["message"]
        status, _, out = _request(srv.url, "POST", "/v1/messages", {"model": "m"})
        assert status == 400
        assert json.loads(out)["error"]["message"] == "request: missing field 'messages'"
        status, _, out = _request(srv.url, "POST", "/v1/chat/completions", b"{}",
                                  {"content-encoding": "br"})
        assert status == 400 and "unsupported encoding 'br'" in json.loads(out)["error"]["message"]
    assert [r.get("error", "")[:20] for r in srv.exchanges] == [
        "request body: not JS", "request: missing fie", "header Content-Encod"]


def test_compressed_and_chunked_bodies_are_read() -> None:
    raw = json.dumps(_chat_body()).encode()
    with ModelServer(ScriptedBrain(PLAN)) as srv:
        for enc, data in [("gzip", gzip.compress(raw)),
                          ("zstd", zstandard.ZstdCompressor().compress(raw))]:
            status, _, _ = _request(srv.url, "POST", "/v1/chat/completions", data,
                                    {"content-encoding": enc})
            assert status == 200
        host, port = srv.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("POST", "/v1/chat/completions", body=iter([raw[:10], raw[10:]]),
                     headers={"content-type": "application/json"}, encode_chunked=True)
        assert conn.getresponse().status == 200
        conn.close()
    digests = {r["request_sha256"] for r in srv.exchanges}
    assert digests == {hashlib.sha256(raw).hexdigest()}  # digest of the decoded body


class _Failing(StepBrain):
    name = "failing"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def next_step(self, conversation: Any) -> Step:
        raise self.exc


def test_brain_failures_are_answered_and_recorded(capsys: pytest.CaptureFixture) -> None:
    with ModelServer(_Failing(BrainError("no idea"))) as srv:
        status, _, out = _request(srv.url, "POST", "/v1/responses", _responses_body())
        assert status == 502 and json.loads(out)["error"]["message"] == "no idea"
    assert srv.exchanges[0]["error"] == "no idea"
    with ModelServer(_Failing(KeyError("bug"))) as srv:
        status, _, _ = _request(srv.url, "POST", "/v1/responses", _responses_body())
        assert status == 500
    assert srv.exchanges[0]["error"] == "KeyError: 'bug'"
    assert "KeyError" in capsys.readouterr().err  # a defect shows its traceback


# ----------------------------------------------------------------------------- lifetime


def _refused(url: str) -> bool:
    try:
        _request(url, "HEAD", "/")
    except (ConnectionError, OSError):
        return True
    return False


def test_ends_after_n_model_requests() -> None:
    srv = ModelServer(ScriptedBrain(PLAN), ServerConfig(max_requests=2)).start()
    try:
        _request(srv.url, "HEAD", "/")  # a probe is not a model request
        _request(srv.url, "POST", "/v1/chat/completions", _chat_body())
        assert not srv.ended
        status, headers, _ = _request(srv.url, "POST", "/v1/chat/completions", _chat_body())
        assert status == 200 and headers.get("connection") == "close"
        assert srv.wait(10) and srv.ended and srv.requests_served == 2
        assert _refused(srv.url)
    finally:
        srv.close()


def test_ends_after_idle_seconds() -> None:
    srv = ModelServer(ScriptedBrain(PLAN), ServerConfig(idle_timeout_s=0.3)).start()
    try:
        t = time.monotonic()
        _request(srv.url, "HEAD", "/")
        assert srv.wait(10)
        assert time.monotonic() - t >= 0.3 and _refused(srv.url)
    finally:
        srv.close()


def test_close_is_idempotent_and_frees_the_port() -> None:
    srv = ModelServer(ScriptedBrain(PLAN)).start()
    port = srv.port
    srv.close()
    srv.close()
    assert srv.ended
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
    never_started = ModelServer(ScriptedBrain(PLAN))
    never_started.close()
    assert never_started.ended


# ----------------------------------------------------------------------------- latency


def test_latency_model_is_seeded_and_per_token() -> None:
    lat = LatencyModel(per_token_s=0.01, seed=3, first_token_s=0.05)
    assert lat.delay(100, "k") == lat.delay(100, "k")
    assert lat.delay(100, "k") != LatencyModel(0.01, seed=4, first_token_s=0.05).delay(100, "k")
    assert lat.delay(0, "k") == 0.05
    draws = [LatencyModel(0.01, seed=s).delay(400, "k") for s in range(200)]
    assert abs(sum(draws) / len(draws) - 4.0) < 0.1  # mean n * per_token_s
    with pytest.raises(ValueError, match="must be >= 0"):
        LatencyModel(-1)


def test_server_waits_the_emulated_latency_and_records_it() -> None:
    lat = LatencyModel(per_token_s=0.002, seed=1, first_token_s=0.1)
    with ModelServer(ScriptedBrain(PLAN), ServerConfig(latency=lat)) as srv:
        t = time.monotonic()
        _request(srv.url, "POST", "/v1/chat/completions", _chat_body())
        took = time.monotonic() - t
        _request(srv.url, "HEAD", "/")
    rec = srv.exchanges[0]
    expected = lat.delay(rec["output_tokens"], rec["transcript_sha256"])
    assert rec["emulated_latency_s"] == round(expected, 6) and took >= expected >= 0.1
    assert rec["duration_s"] >= expected
    assert "emulated_latency_s" not in srv.exchanges[1]  # probes are not model answers


# ----------------------------------------------------------------------------- process


def test_runs_as_a_process_printing_its_port(tmp_path: Path) -> None:
    plan = tmp_path / "P.json"
    plan.write_text(json.dumps([{"finish": "done"}]))
    audit = tmp_path / "audit.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "oracle.agents.model_server", "--brain", "scripted", "--plan", str(plan),
         "--port", "0", "--max-requests", "1", "--audit", str(audit), "--run-id", "proc"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        status, _, out = _request(f"http://127.0.0.1:{port}", "POST", "/v1/chat/completions",
                                  _chat_body())
        assert status == 200 and json.loads(out)["choices"][0]["message"]["content"] == "done"
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        proc.communicate()
    assert [r["key"] for r in AuditLog(audit).records()] == ["proc/000000"]


@pytest.mark.parametrize("args, msg", [
    (["--host", "0.0.0.0"], "binds loopback only"),
    (["--brain", "scripted"], "needs a plan"),
    (["--brain", "proxy", "--url", "ftp://x"], "url must be http"),
    (["--port", "-1"], "--port: must be >= 0"),
])
def test_process_errors_are_one_line(args: list[str], msg: str, tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "oracle.agents.model_server", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- proxy


class _Seeing(Brain):
    """An upstream that answers from a plan and remembers the headers it was sent."""

    name = "seeing"

    def __init__(self) -> None:
        self.inner = ScriptedBrain(PLAN)
        self.headers: list[dict[str, str]] = []

    def respond(self, request: ModelRequest) -> Step:
        self.headers.append(dict(request.headers))
        return self.inner.next_step(request.conversation)


def test_proxy_forwards_to_the_endpoint_and_audits_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-" + "9" * 20
    monkeypatch.setenv("RIPPLECP_TEST_KEY", secret)
    upstream_brain = _Seeing()
    with ModelServer(upstream_brain, ServerConfig(audit=tmp_path / "up.jsonl")) as up, \
            ModelServer(ProxyBrain(up.url, key_env="RIPPLECP_TEST_KEY"),
                        ServerConfig(audit=tmp_path / "proxy.jsonl")) as proxy:
        outs = []
        for path, body, auth in [("/v1/responses", _responses_body(), {"authorization": "x"}),
                                 ("/v1/messages?beta=true", _messages_body(),
                                  {"x-api-key": "x", "anthropic-version": "2023-06-01"})]:
            status, headers, out = _request(proxy.url, "POST", path, body, auth)
            assert status == 200 and headers["content-type"] == "text/event-stream"
            outs.append(out)
        assert _request(proxy.url, "POST", "/v1/chat/completions", b"{bad")[0] == 400
    up_recs, proxy_recs = AuditLog(tmp_path / "up.jsonl").records(), \
        AuditLog(tmp_path / "proxy.jsonl").records()
    assert [r["response_sha256"] for r in proxy_recs[:2]] == \
        [r["response_sha256"] for r in up_recs] == [hashlib.sha256(o).hexdigest() for o in outs]
    assert [r["request_sha256"] for r in proxy_recs[:2]] == [r["request_sha256"] for r in up_recs]
    assert all(r["brain"] == "proxy" for r in proxy_recs)
    # the key travels only in the header the endpoint's protocol names, never into a log
    assert upstream_brain.headers[0]["authorization"] == f"Bearer {secret}"
    assert upstream_brain.headers[1]["x-api-key"] == secret
    assert upstream_brain.headers[1]["anthropic-version"] == "2023-06-01"
    for log in ("up.jsonl", "proxy.jsonl"):
        assert secret not in (tmp_path / log).read_text()


def test_proxy_errors_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RIPPLECP_UNSET_KEY", raising=False)
    with ModelServer(ScriptedBrain(PLAN)) as up, \
            ModelServer(ProxyBrain(up.url, key_env="RIPPLECP_UNSET_KEY")) as proxy:
        status, _, out = _request(proxy.url, "POST", "/v1/responses", _responses_body())
        assert status == 502
        assert "environment variable RIPPLECP_UNSET_KEY is not set" in out.decode()
        status, _, out = _request(proxy.url, "POST", "/v1/responses", {"model": "x"})
        assert status == 400  # the proxy reads the request like any other brain
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # bound, never listening: connection refused
        with ModelServer(ProxyBrain(f"http://127.0.0.1:{dead}")) as proxy:
            status, _, out = _request(proxy.url, "POST", "/v1/responses", _responses_body())
    assert status == 502 and "unreachable" in out.decode()
    with ModelServer(ScriptedBrain(PLAN)) as up, ModelServer(ProxyBrain(up.url)) as proxy:
        # the endpoint's own error passes through as it is
        status, _, out = _request(proxy.url, "POST", "/v1/messages", {"model": "m"})
    assert status == 400 and "missing field 'messages'" in out.decode()
    with pytest.raises(ValueError, match="NAME of an environment variable"):
        ProxyBrain("http://127.0.0.1:1", key_env="KEY=sk-123")
