"""Real JupyterLab + headless Chromium for end-to-end widget tests.

Everything lives in a temporary folder (HOME, Jupyter config/data/runtime dirs, the
notebooks); the lab runs this interpreter (``sys.executable``) through a kernelspec
written into the temporary JUPYTER_DATA_DIR. The browser may only reach loopback,
``data:`` and ``blob:`` URLs; other requests are aborted and recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = os.environ.get("GRADVIZ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-proxy-server",
]
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
T = TypeVar("T")

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def settled(read: Callable[[], T], timeout: float = 5, quiet: float = 0.3) -> T:
    """What ``read`` returns once it has not changed for ``quiet`` s (an animation or a run of
    input events over); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last, since = read(), time.monotonic()
    while True:
        time.sleep(0.05)
        value = read()
        if value != last:
            last, since = value, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"still changing after {timeout:.0f} s: {value!r}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_notebook(path: Path, cells: list[str]) -> Path:
    """Write a minimal nbformat-4 notebook with the given code cells (python3 kernel)."""
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            {
                "cell_type": "code",
                "id": f"cell-{i}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
    }
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return path


class JupyterLabServer:
    """A JupyterLab server in a throw-away environment, stopped via /api/shutdown."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "notebooks"
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / "jupyterlab.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def environment(self) -> dict[str, str]:
        """Environment for the server and its kernels, all state under ``base``."""
        b = self.base
        dirs = {
            "HOME": b / "home",
            "IPYTHONDIR": b / "ipython",
            "JUPYTER_CONFIG_DIR": b / "jupyter_config",
            "JUPYTER_DATA_DIR": b / "jupyter_data",
            "JUPYTER_RUNTIME_DIR": b / "jupyter_runtime",
            "JUPYTERLAB_SETTINGS_DIR": b / "lab_settings",
            "JUPYTERLAB_WORKSPACES_DIR": b / "lab_workspaces",
            "npm_config_cache": b / "npm_cache",
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON"))}
        for key, d in dirs.items():
            d.mkdir(parents=True, exist_ok=True)
            env[key] = str(d)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        return env

    def prepare(self, env: dict[str, str]) -> None:
        """Kernelspec pointing at sys.executable; lab page config without the news toast."""
        kernel_dir = Path(env["JUPYTER_DATA_DIR"]) / "kernels" / "python3"
        kernel_dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (gradviz test)",
            "language": "python",
            "env": {"PYTHONPATH": env["PYTHONPATH"]},
        }
        (kernel_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
        labconfig = Path(env["JUPYTER_CONFIG_DIR"]) / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        page_config = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}
        (labconfig / "page_config.json").write_text(json.dumps(page_config), encoding="utf-8")
        self.root.mkdir(parents=True, exist_ok=True)

    def start(self, timeout: float = 90) -> None:
        """Launch ``jupyter lab`` and wait until /api/status answers."""
        env = self.environment()
        self.prepare(env)
        cmd = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
            "--ServerApp.ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
            f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.root}",
            "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ]  # fmt: skip
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            cmd, env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        wait_until(self._up, timeout, f"JupyterLab on port {self.port}", interval=0.3)

    def _up(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited ({self.proc.returncode}):\n{self.log_tail()}")
        try:
            with _NO_PROXY.open(f"{self.url}/api/status?token={self.token}", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, n: int = 4000) -> str:
        """The end of the server log."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20) -> None:
        """POST /api/shutdown, then make sure the process is gone."""
        if self.proc is None:
            return
        req = urllib.request.Request(f"{self.url}/api/shutdown?token={self.token}", method="POST")
        try:
            _NO_PROXY.open(req, timeout=5).close()
        except (urllib.error.URLError, OSError):
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None


def is_allowed(url: str) -> bool:
    """Loopback, data: and blob: URLs may load; everything else is blocked."""
    parsed = urlparse(url)
    if parsed.scheme in ("data", "blob", "about"):
        return True
    return parsed.hostname in LOOPBACK


class LabPage:
    """A browser page on the lab with helpers for notebooks, kernel and artifacts."""

    def __init__(self, server: JupyterLabServer, page: Any) -> None:
        self.server = server
        self.page = page
        self.blocked: list[str] = []
        self.console: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        page.context.route("**/*", self._route)

    def _route(self, route: Any) -> None:
        url = route.request.url
        if is_allowed(url):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def notebook(self, name: str, cells: list[str]) -> Path:
        """Write a notebook into the lab's root folder."""
        return write_notebook(self.server.root / name, cells)

    def copy_notebook(self, src: Path, name: str | None = None) -> Path:
        """Copy an existing notebook into the lab's root folder."""
        dest = self.server.root / (name or src.name)
        shutil.copyfile(src, dest)
        return dest

    def open_notebook(self, name: str, timeout: float = 60) -> None:
        """Open ``name`` in the lab and wait until its kernel is idle."""
        self._open(
            f"{self.server.url}/lab/tree/{name}?token={self.server.token}&reset", name, timeout
        )

    def open_notebook7(self, name: str, timeout: float = 120) -> None:
        """Open ``name`` in Notebook 7's notebook page and wait until its kernel is idle."""
        self._open(f"{self.server.url}/notebooks/{name}?token={self.server.token}", name, timeout)

    def _open(self, url: str, name: str, timeout: float) -> None:
        self.page.goto(url, wait_until="domcontentloaded", timeout=timeout * 1000)
        self.page.wait_for_function(
            """(name) => {
                const w = window.jupyterapp?.shell?.currentWidget;
                return w?.context?.path === name &&
                       w.sessionContext?.session?.kernel?.status === 'idle';
            }""",
            arg=name,
            timeout=timeout * 1000,
            polling=200,
        )

    def run_all(self) -> None:
        """Run every cell of the current notebook (returns when queued)."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")

    def execute(self, code: str, timeout: float = 60) -> str:
        """Run ``code`` in the notebook's kernel (queued after running cells); return stdout."""
        result = self.page.evaluate(
            """async ([code, ms]) => {
                const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
                const future = kernel.requestExecute({ code, store_history: false, stop_on_error: true });
                let out = "", err = "";
                future.onIOPub = (msg) => {
                    const t = msg.header.msg_type;
                    if (t === "stream") out += msg.content.text;
                    if (t === "error") err = `${msg.content.ename}: ${msg.content.evalue}`;
                };
                const timer = new Promise((_, reject) => setTimeout(() => reject(new Error("execute timed out")), ms));
                await Promise.race([future.done, timer]);
                return { out, err };
            }""",
            [code, timeout * 1000],
        )
        if result["err"]:
            raise RuntimeError(f"kernel error running {code!r}: {result['err']}")
        return str(result["out"])

    def evaluate_json(self, code: str, timeout: float = 60) -> Any:
        """Run ``code`` (which must print one JSON value as its last line) and decode it."""
        lines = self.execute(code, timeout).strip().splitlines()
        return json.loads(lines[-1]) if lines else None

    def screenshot(self, name: str, selector: str | None = None) -> Path:
        """Save a PNG into test-artifacts/ (the whole page, or one element)."""
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        if selector:
            self.page.locator(selector).first.screenshot(path=str(path))
        else:
            self.page.screenshot(path=str(path), full_page=True)
        return path

    def save_logs(self, name: str) -> None:
        """Write console messages, blocked requests and the server log to test-artifacts/."""
        ARTIFACTS.mkdir(exist_ok=True)
        text = "## console\n" + "\n".join(self.console)
        text += "\n\n## blocked requests\n" + "\n".join(self.blocked)
        text += "\n\n## server log (tail)\n" + self.server.log_tail()
        (ARTIFACTS / f"{name}.log").write_text(text, encoding="utf-8")


def py(lab: LabPage, expr: str) -> Any:
    """Evaluate a Python expression in the notebook's kernel (JSON-encoded round trip)."""
    return lab.evaluate_json(f"print(json.dumps({expr}))")


@contextlib.contextmanager
def sized_page(
    server: JupyterLabServer, browser: Any, size: tuple[int, int], test: str
) -> Iterator[LabPage]:
    """A fresh page of `size` (width, height) on `server`; its logs saved under `test`'s name."""
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    context.set_default_timeout(30_000)
    page = LabPage(server, context.new_page())
    try:
        yield page
    finally:
        page.save_logs(test)
        context.close()
