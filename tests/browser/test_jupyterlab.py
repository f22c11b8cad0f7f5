"""JupyterLab smoke test in a real browser: open notebook 01, run all cells, check the result.

Starts JupyterLab on 127.0.0.1 with a token, in a scratch folder that holds a copy of the
notebook (the source is never modified) and a link to data/, drives Debian's Chromium through
Playwright (no browser download), runs all cells through JupyterLab's own command, then checks
that every code cell ran, that no cell produced an error and that a figure was rendered. A
screenshot goes to build/jupyterlab_01_reference_math.png.

Skips, with the reason, when Chromium or Playwright is missing (``.ci/run`` installs both).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "01_reference_math.ipynb"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install 'inkling-kernels[browser]'")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    work = tmp_path / "lab"
    (work / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, work / "notebooks" / NOTEBOOK)
    (work / "data").symlink_to(ROOT / "data")
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")}
    log = open(tmp_path / "lab.log", "w")  # noqa: SIM115 - closed in the fixture's teardown
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True",
            "--allow-root", "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
        yield url, token, work
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_notebook_runs_in_jupyterlab(lab):
    url, token, work = lab
    shots = ROOT / "build"
    shots.mkdir(exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(120_000)
            page.goto(f"{url}/lab/tree/notebooks/{NOTEBOOK}?token={token}")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget")
            # wait for the kernel, then run everything through JupyterLab's own command
            page.wait_for_function(
                "() => { const w = window.jupyterapp.shell.currentWidget;"
                " return w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
                " && w.sessionContext.session.kernel.status === 'idle'; }"
            )
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            # every code cell has an execution count and the kernel is idle again
            page.wait_for_function(
                "() => { const w = window.jupyterapp.shell.currentWidget; const cells = w.content.model.cells;"
                " let pending = 0; for (let i = 0; i < cells.length; i++) { const c = cells.get(i);"
                " if (c.type === 'code' && !c.executionCount) pending++; }"
                " return pending === 0 && w.sessionContext.session.kernel.status === 'idle'; }",
                timeout=300_000,
            )
            model = json.loads(
                page.evaluate("() => JSON.stringify(window.jupyterapp.shell.currentWidget.content.model.toJSON())")
            )
            page.wait_for_selector(".jp-RenderedImage img")
            images = page.locator(".jp-RenderedImage img").count()
            page.screenshot(path=str(shots / "jupyterlab_01_reference_math.png"), full_page=False)
        finally:
            browser.close()
    code = [c for c in model["cells"] if c["cell_type"] == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert code and all(c.get("execution_count") for c in code)
    assert not errors, [f"{e.get('ename')}: {e.get('evalue')}" for e in errors]
    assert images >= 1
    assert any("ipykernel" not in json.dumps(c.get("outputs", [])) for c in code)
