"""Notebook 03 in a real JupyterLab, driven by headless Chromium: the step slider works.

The nbclient tests (tests/notebooks/test_notebooks.py) run every notebook, but without a browser
no widget is ever rendered, so ``Recorder.widget()``'s slider is never seen, let alone
moved. This test starts ``jupyter lab`` on a free port with a random token, opens a copy
of notebooks/03_paged.ipynb in headless Chromium through selenium, runs all cells from
the Run menu, presses the right-arrow key on the slider's handle and checks that the
block map drawn under it changes. Screenshots and both block maps are saved in the
test's ``tmp_path`` (pytest prints it on failure; ``--basetemp DIR`` keeps them in DIR).

It needs Chromium (or Chrome) and its chromedriver on PATH; ``.ci/run`` installs
Debian's ``chromium`` and ``chromium-driver``. Without them, or without selenium or
jupyterlab, it is skipped and the skip says why.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "03_paged.ipynb"
TOTAL_TIMEOUT_S = 240.0  # everything after the server is up: page load, run all, slider
SERVER_START_TIMEOUT_S = 60.0
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver",)
STEPS_TO_MOVE = 3  # arrow presses: far enough that the pool itself differs, not only the title

# JupyterLab user settings written to a private settings folder. Why each one:
# - windowingMode "none": every cell stays in the DOM, so counting prompts sees all cells;
# - autosave off: the served copy stays as it was (nothing depends on it, but it is tidier);
# - no news / update checks: their notification toasts could cover the page, and CI is offline.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def _first_on_path(names: tuple[str, ...]) -> str | None:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def _browser_or_skip() -> tuple[str, str]:
    """(browser, chromedriver) paths, or skip saying what is missing and how to get it."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
    pytest.importorskip(
        "jupyterlab", reason="jupyterlab is not installed (pip install -e '.[notebooks]')"
    )
    pytest.importorskip(
        "ipywidgets", reason="ipywidgets is not installed (pip install -e '.[notebooks]')"
    )
    browser, driver = _first_on_path(BROWSERS), _first_on_path(DRIVERS)
    missing = ([f"a browser ({' / '.join(BROWSERS)})"] if browser is None else []) + (
        [f"a driver ({' / '.join(DRIVERS)})"] if driver is None else [])
    if missing:
        pytest.skip(
            f"no headless browser: {' and '.join(missing)} not found on PATH; install "
            "Debian's chromium and chromium-driver (apt-get install chromium chromium-driver, "
            "as .ci/run does)"
        )
    assert browser is not None and driver is not None
    return browser, driver


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    """A running JupyterLab: where it listens, its token, the folder it serves, its log."""

    url: str
    token: str
    root_dir: Path
    log: Path
    process: subprocess.Popen

    def api(self, path: str, method: str = "GET") -> Any:
        req = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 40) -> str:
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(lines[-n:])


def _lab_env(home: Path) -> dict[str, str]:
    """The server's (and so the kernel's) environment, cut off from the user's Jupyter set-up."""
    env = dict(os.environ)
    # Private config, data and runtime folders: a user-level ``python3`` kernelspec or
    # server config cannot redirect this run. The venv's own folders (sys.prefix/share/
    # jupyter, holding the python3 kernelspec and the ipywidgets lab extension) stay on
    # the path, and the python3 kernelspec's argv "python" is run as the server's own
    # interpreter by jupyter_client, i.e. this venv's python.
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        env[var] = str(home / sub)
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    # The nbclient tests set MPLBACKEND=Agg; with it inherited, plt.show() in the kernel
    # would draw nothing and the slider's output would stay empty. Unset, ipykernel
    # picks its inline backend.
    env.pop("MPLBACKEND", None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _stop(process: subprocess.Popen, lab: Lab | None) -> None:
    """Shut the server down: politely (kernels too), then SIGTERM, then SIGKILL."""
    if process.poll() is None and lab is not None:
        try:  # the REST shutdown also shuts down the kernels it started
            lab.api("/api/shutdown", method="POST")
            process.wait(timeout=15)
        except (OSError, urllib.error.URLError, subprocess.TimeoutExpired):
            pass
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        try:  # the server runs in its own process group (start_new_session)
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """A JupyterLab server serving a copy of notebook 03; killed in teardown."""
    _browser_or_skip()
    # A copy, not notebooks/ itself: JupyterLab writes outputs and checkpoints into what it
    # serves, and the committed notebooks must stay output-free (test_notebooks.py checks).
    root_dir = tmp_path / "notebooks"
    root_dir.mkdir()
    shutil.copy(NOTEBOOK, root_dir / NOTEBOOK.name)
    shutil.copy(NOTEBOOK.parent / "predict.py", root_dir)  # its prediction exercises' checks
    home = tmp_path / "jupyter"
    settings = home / "lab-settings"
    for rel, values in LAB_SETTINGS.items():
        path = settings / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    log = tmp_path / "jupyterlab.log"
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",  # another port would leave us polling the wrong one
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
        "--ServerApp.allow_root=True",  # CI runs as root; the server refuses root without it
        "--ServerApp.terminals_enabled=False",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={home / 'workspaces'}",
    ]
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            cmd, cwd=root_dir, env=_lab_env(home), stdin=subprocess.DEVNULL,
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = Lab(f"http://127.0.0.1:{port}", token, root_dir, log, process)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"jupyter lab exited with {process.returncode}:\n{server.log_tail()}")
            try:
                server.api("/api/status")
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not answer within {SERVER_START_TIMEOUT_S:.0f} "
                                f"s:\n{server.log_tail()}")
                time.sleep(0.5)
        yield server
    finally:
        _stop(process, server)


@pytest.fixture
def chrome(lab: Lab, tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium through selenium, quit in teardown."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = _browser_or_skip()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start;
    # --disable-dev-shm-usage: containers often have a tiny /dev/shm.
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'chrome-profile'}"):
        options.add_argument(arg)
    # An explicit driver path keeps Selenium Manager from trying to download one.
    service = Service(executable_path=driver_path, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()


class _Clock:
    """One budget for all the waits of a test, so that slow steps share TOTAL_TIMEOUT_S."""

    def __init__(self, driver: Any, lab: Lab, shots: Path) -> None:
        self.driver, self.lab, self.shots = driver, lab, shots
        self.deadline = time.monotonic() + TOTAL_TIMEOUT_S

    def until(self, what: str, condition: Callable[[Any], Any], poll_s: float = 0.25) -> Any:
        from selenium.common.exceptions import TimeoutException, WebDriverException
        from selenium.webdriver.support.ui import WebDriverWait

        left = self.deadline - time.monotonic()
        try:
            return WebDriverWait(self.driver, max(left, 1.0), poll_frequency=poll_s,
                                 ignored_exceptions=(WebDriverException,)).until(condition)
        except TimeoutException:
            shot = self.shots / "timeout.png"
            self.driver.save_screenshot(str(shot))
            pytest.fail(
                f"timed out ({TOTAL_TIMEOUT_S:.0f} s budget) waiting for {what}; screenshot "
                f"{shot}\n--- jupyter lab log ---\n{self.lab.log_tail()}", pytrace=False)


def _prompts(driver: Any) -> list[str]:
    """The execution prompt of every code cell, e.g. ['[1]:', '[*]:', '[ ]:']."""
    return driver.execute_script(
        "return [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]"
        ".map(e => e.textContent.trim());")


def _accept_kernel_dialog(driver: Any) -> bool:
    """Click "Select" in JupyterLab's "Select Kernel" dialog if it is up; True if it was.

    JupyterLab asks when cells are run before the notebook's session is up (a race that a
    busy 2-core machine can lose); the preselected choice is the notebook's python3.
    """
    for dialog in driver.find_elements("css selector", ".jp-Dialog"):
        if "Select Kernel" in dialog.text:
            dialog.find_element("css selector", ".jp-Dialog-button.jp-mod-accept").click()
            return True
    return False


def _kernel_ready(lab: Lab, driver: Any) -> bool:
    """The notebook's kernel is up and idle, on the server and in the page.

    The page alone is not enough: its execution indicator says "idle" even before the
    session exists, and Run All then asks which kernel to start.
    """
    _accept_kernel_dialog(driver)
    sessions = lab.api("/api/sessions")
    up = any(s["path"].endswith(NOTEBOOK.name) and s["kernel"]["execution_state"] == "idle"
             for s in sessions)
    shown = driver.find_elements(
        "css selector", ".jp-Notebook-ExecutionIndicator[data-status='idle']")
    return up and bool(shown) and not driver.find_elements("css selector", ".jp-Dialog")


def _run_all(clock: _Clock, lab: Lab, driver: Any) -> None:
    """Run > Run All Cells, as a student would, until the cells start running.

    If JupyterLab still asks for a kernel, that Run All was dropped: answer and run again.
    """
    for _ in range(3):
        clock.until("the kernel to start", lambda d: _kernel_ready(lab, d))
        # Menus can be slow to build on a busy machine: retry the clicks within the budget.
        clock.until("Run > Run All Cells", lambda d: _click_menu(d, "Run", "Run All Cells") is None)
        started = clock.until(
            "Run All to start",
            lambda d: "asked" if _accept_kernel_dialog(d) else any(
                p != "[ ]:" for p in _prompts(d)))
        if started is True:
            return
    pytest.fail("JupyterLab kept asking for a kernel; Run All never started", pytrace=False)


def _all_ran(driver: Any) -> list[str] | bool:
    """Every code cell's prompt once all have run; fails at once when one raised.

    Run All stops at a cell that raises and leaves the rest unrun, so waiting on would
    only spend the budget. JupyterLab renders a traceback as a stderr output.
    """
    stderr = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
    for out in driver.find_elements("css selector", stderr):
        if "Traceback (most recent call last)" in out.text:
            pytest.fail(f"a cell of {NOTEBOOK.name} raised:\n{out.text[-2000:]}", pytrace=False)
    prompts = _prompts(driver)
    done = bool(prompts) and all(p[1:-2].isdigit() for p in prompts)  # "[12]:"
    return prompts if done else False


def _block_map_src(driver: Any) -> str | None:
    """The slider's output image (a data: URL of the PNG), or None while none is drawn."""
    imgs = driver.find_elements(
        "css selector", ".widget-interact .widget-output .jp-OutputArea-output img")
    return imgs[0].get_attribute("src") if len(imgs) == 1 else None


def _save_png(data_url: str, path: Path) -> None:
    path.write_bytes(base64.b64decode(data_url.split(",", 1)[1]))


def _click_menu(driver: Any, menu: str, item: str) -> None:
    """Open a JupyterLab main-menu menu and click one item, by their labels."""
    from selenium.webdriver.common.by import By

    bar = driver.find_element(
        By.XPATH, f"//*[contains(@class,'lm-MenuBar-itemLabel')][normalize-space()='{menu}']")
    bar.click()
    entry = driver.find_element(
        By.XPATH, "//*[contains(@class,'lm-Menu-itemLabel')]"
                  f"[normalize-space()='{item}']")
    entry.click()


def test_slider_moves_block_map_in_jupyterlab(lab: Lab, chrome: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver = chrome
    # The python3 kernel is this venv's python: jupyter_client runs an argv of "python"
    # (the venv's kernelspec) as the server's own interpreter, which is sys.executable.
    argv0 = lab.api("/api/kernelspecs")["kernelspecs"]["python3"]["spec"]["argv"][0]
    as_server = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info)}
    assert argv0 in as_server or Path(argv0).resolve() == Path(sys.executable).resolve(), (
        f"JupyterLab's python3 kernel runs {argv0}, not {sys.executable}")
    clock = _Clock(driver, lab, tmp_path)
    driver.get(f"{lab.url}/lab/tree/{NOTEBOOK.name}?token={lab.token}")

    clock.until("the notebook to open", lambda d: len(_prompts(d)) > 0)
    _run_all(clock, lab, driver)
    prompts = clock.until("every cell to run", _all_ran)
    print(f"ran {len(prompts)} code cells")

    # The slider: if Recorder.widget() fell back to its static strip, there is none.
    handle = clock.until(
        "the step slider (Recorder.widget() fell back to a strip if it printed why)",
        lambda d: d.find_element(By.CSS_SELECTOR, ".widget-interact .widget-slider .noUi-handle"))
    readout = driver.find_element(By.CSS_SELECTOR, ".widget-interact .widget-readout")
    before = clock.until("the block map of step 0", _block_map_src)
    assert readout.text.strip() == "0", f"the slider starts at {readout.text!r}, not 0"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", handle)
    _save_png(before, tmp_path / "block_map_before.png")
    driver.save_screenshot(str(tmp_path / "jupyterlab_before.png"))

    # Keyboard on the handle: noUiSlider moves one step per arrow key, and fires the
    # "change" event that a continuous_update=False IntSlider syncs to the kernel.
    for _ in range(STEPS_TO_MOVE):
        handle.send_keys(Keys.ARROW_RIGHT)
    clock.until(f"the readout to show step {STEPS_TO_MOVE}",
                lambda d: readout.text.strip() == str(STEPS_TO_MOVE))

    def redrawn(d: Any) -> str | bool:
        # Each arrow press is one redraw in the kernel, in order: the map is final once
        # it differs from step 0's, the kernel is idle, and it stays the same for a second.
        src = _block_map_src(d)
        if src is None or src == before or not _kernel_ready(lab, d):
            return False
        time.sleep(1.0)
        return src if _block_map_src(d) == src else False

    after = clock.until(f"the block map to be redrawn for step {STEPS_TO_MOVE}", redrawn)
    _save_png(after, tmp_path / "block_map_after.png")
    driver.save_screenshot(str(tmp_path / "jupyterlab_after.png"))
    assert base64.b64decode(after.split(",", 1)[1]) != base64.b64decode(before.split(",", 1)[1])
    print(f"screenshots and block maps in {tmp_path}")
