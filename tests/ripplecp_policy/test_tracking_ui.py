"""The real MLflow UI on a store made by ``ripplecp_policy.tracking``: started on loopback
with :func:`~ripplecp_policy.tracking.ui_command`, read over HTTP, then stopped."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ripplecp_policy import tracking


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((tracking.UI_HOST, 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=60) as r:  # noqa: S310 - loopback only
        return r.status, r.read()


def _non_loopback_address() -> str | None:
    """An address of this machine other than loopback (None if it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent for UDP connect
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


@pytest.mark.slow
def test_the_ui_serves_the_store_on_loopback_only(tmp_path: Path) -> None:
    exp_id = tracking.ensure_experiment("study", tmp_path)
    port = _free_port()
    cmd = shlex.split(tracking.ui_command(tmp_path, port=port))
    cmd[0] = str(Path(sys.executable).with_name("mlflow"))
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    base = f"http://{tracking.UI_HOST}:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if _get(base + "/health")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "mlflow ui did not answer within 120 s"
            time.sleep(0.5)
        status, page = _get(base + "/")
        assert status == 200 and b"<html" in page.lower()
        _, body = _get(f"{base}/ajax-api/2.0/mlflow/experiments/get?experiment_id={exp_id}")
        exp = json.loads(body)["experiment"]
        tags = {t["key"]: t["value"] for t in exp.get("tags", [])}
        # the type the UI reads (MLflow 3 before the workflow selector) says "runs table"
        assert tags[tracking.EXPERIMENT_KIND_TAG] == tracking.EXPERIMENT_KIND
        assert exp["artifact_location"] == (tmp_path / "artifacts" / "study").resolve().as_uri()
        # the selector's own type comes from the URL runs_url gives; the page it opens is the UI
        url = tracking.runs_url(exp_id, port=port)
        assert url.startswith(base + "/#/experiments/") and "workflowType=machine_learning" in url
        assert _get(url.split("#")[0])[0] == 200
        other = _non_loopback_address()
        if other is not None:  # bound to loopback: another interface of this machine is refused
            with pytest.raises(OSError), socket.create_connection((other, port), timeout=2):
                pass
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
