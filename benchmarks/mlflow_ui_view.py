"""Does the MLflow UI open a study on the comparison? Checked in the real UI, in headless Chromium.

    python benchmarks/mlflow_ui_view.py                    # a --quick main job into a temporary store
    python benchmarks/mlflow_ui_view.py --mlruns DIR       # the newest study of an existing store
    python benchmarks/mlflow_ui_view.py --out DIR          # keep the screenshots and the DOMs

It serves the store with the real ``mlflow server --backend-store-uri sqlite:///... --host
127.0.0.1`` (loopback, a free port), opens in a fresh browser profile (a first visit: no
remembered layout) the address the study printed — its runs table with the view the study
saved (``ripplecp_policy.tracking.save_runs_view``) — and, for contrast, the same table
without the view. From the rendered DOM it checks, with the view: the child runs are rows
(``<family>/first-boundary/<budget>`` is visible, and it is the first run row), and the
metric columns ``total_failure_cost`` and ``vs_first_boundary`` are headers; without the
view: none of this shows (MLflow opens on the parent alone, collapsed — what the view is
for). Prints one line per check and exits 0 when every one holds, 1 otherwise.

Needs Chromium (Debian's ``chromium`` package, or ``$CHROMIUM`` naming the binary), so it
is not part of CI (``python -m pytest``); a few minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ripplecp_policy import tracking  # noqa: E402

#: the checks' columns: what a comparison reads first
METRIC_COLUMNS = ("total_failure_cost", "vs_first_boundary")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((tracking.UI_HOST, 0))
        return int(s.getsockname()[1])


def chromium() -> str:
    """The Chromium binary: ``$CHROMIUM`` or the first of chromium / chromium-browser /
    google-chrome on PATH; SystemExit (2) naming how to install it otherwise."""
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    raise SystemExit("mlflow_ui_view: no Chromium found (apt-get install chromium, or set $CHROMIUM)")


def quick_study(store: Path, out: Path) -> None:
    """The main job, --quick, into ``store`` (the store the UI then serves)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "experiments.matched_budget", "--quick", "--mlruns",
                        str(store), "--out", str(out)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"mlflow_ui_view: the quick study failed: {p.stderr[-2000:]}")


def newest_study(store: Path, experiment: str) -> tuple[str, str]:
    """(experiment id, a first-boundary run name) of the newest study in ``experiment``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking.tracking_uri(store))
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"mlflow_ui_view: no experiment {experiment!r} in {store}")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`ripplecp.kind` = 'study'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
    kids = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
                              order_by=["tags.`ripplecp.row` ASC"], max_results=1)
    if not kids:
        raise SystemExit(f"mlflow_ui_view: the newest study in {store} has no child runs")
    return exp.experiment_id, kids[0].info.run_name


def serve(store: Path, port: int) -> subprocess.Popen[bytes]:
    """``mlflow server`` on loopback for ``store``, answering /health (within 300 s)."""
    cmd = [str(Path(sys.executable).with_name("mlflow")), "server", "--backend-store-uri",
           tracking.tracking_uri(store), "--host", tracking.UI_HOST, "--port", str(port), "--workers", "1"]
    proc = subprocess.Popen(cmd, cwd=store, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while True:
        try:
            with urllib.request.urlopen(f"http://{tracking.UI_HOST}:{port}/health", timeout=10) as r:  # noqa: S310
                if r.status == 200:
                    return proc
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise SystemExit("mlflow_ui_view: mlflow server did not answer within 300 s")
        time.sleep(1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server and the workers it started (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)


def render(browser: str, url: str, screenshot: Path) -> str:
    """The DOM of ``url`` after it rendered, in a fresh profile (a first visit), and its
    screenshot at ``screenshot``."""
    base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1900,1100",
            "--virtual-time-budget=30000"]
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        shot = subprocess.run([*base, f"--user-data-dir={profile}", f"--screenshot={screenshot}", url],
                              capture_output=True, text=True, timeout=300)
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        dom = subprocess.run([*base, f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=300)
    if dom.returncode != 0 or shot.returncode != 0:
        raise SystemExit(f"mlflow_ui_view: chromium failed: {(dom.stderr or shot.stderr)[-1000:]}")
    return dom.stdout


def run_rows(dom: str) -> list[str]:
    """The run names the runs table shows, top to bottom (the grid's run-name links)."""
    return re.findall(r'href="#/experiments/\d+/runs/[0-9a-f]+"[^>]*>(?:<[^>]+>)*([^<]+)<', dom)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/mlflow_ui_view.py", description=__doc__.split("\n")[0])
    p.add_argument("--mlruns", type=Path, help="an existing store (default: run a --quick study into a temporary one)")
    p.add_argument("--experiment", default="matched-budget", help="the study's MLflow experiment")
    p.add_argument("--out", type=Path, help="keep the screenshots and DOMs here (default: a temporary folder)")
    a = p.parse_args(argv)
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="ui-view-") as tmp:
        out = a.out or Path(tmp) / "out"
        out.mkdir(parents=True, exist_ok=True)
        store = a.mlruns
        if store is None:
            store = Path(tmp) / "mlruns"
            print("running python -m experiments.matched_budget --quick ...", flush=True)
            quick_study(store, Path(tmp) / "study")
        exp_id, first = newest_study(store.resolve(), a.experiment)
        port = free_port()
        server = serve(store.resolve(), port)
        try:
            with_view = render(browser, tracking.runs_url(exp_id, port=port, view="comparison"),
                               out / "runs_view.png")
            plain = render(browser, tracking.runs_url(exp_id, port=port), out / "runs_plain.png")
        finally:
            stop(server)
        (out / "runs_view.html").write_text(with_view)
        (out / "runs_plain.html").write_text(plain)
    rows, plain_rows = run_rows(with_view), run_rows(plain)
    checks = [
        (f"with the view, the child runs are rows and {first} is the first", bool(rows) and rows[0] == first),
        (f"with the view, {len(rows)} runs show on first open", len(rows) > 1),
        *((f"with the view, the {c} column shows", f">{c}<" in with_view) for c in METRIC_COLUMNS),
        (f"without the view, MLflow shows {len(plain_rows)} run(s) and no child run",
         first not in plain_rows),
    ]
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    print(f"screenshots: {out / 'runs_view.png'}, {out / 'runs_plain.png'}" if a.out else "")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
