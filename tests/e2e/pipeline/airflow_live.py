"""A real Airflow and a real browser for the live DAG test.

:class:`LiveAirflow` runs Airflow 3 the way a deployment does: ``api-server``, ``scheduler``
(LocalExecutor: each task in a process of its own, talking to the API server's execution API)
and ``dag-processor`` as separate processes, on a SQLite metadata DB in a home of their own,
on a free port. The test drives it only through the REST API (``/api/v2`` with a JWT from
``/auth/token``), as an operator's tooling would. No triggerer: the DAG defers nothing.

:class:`Chromium` is headless Chromium driven over the DevTools protocol on a pipe (file
descriptors 3 and 4, no port): it waits for the React UI to render what the test names, clicks,
and takes screenshots. Both start their processes in sessions of their own and stop them by
session id, so nothing survives a failing test: not a LocalExecutor worker, not a task's
supervisor (which puts the task in its own process group), not the JVM a task started.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AIRFLOW = Path(sys.executable).parent / "airflow"
COMPONENTS = ("scheduler", "dag-processor")


class AirflowApiError(RuntimeError):
    """An HTTP error from the Airflow REST API, with the answer's body."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# -- processes by session --------------------------------------------------------------------


def session_members(sid: int) -> list[int]:
    """Pids of every live process in session ``sid`` (orphans included: they keep it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def stop_session(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM every process of ``proc``'s session, SIGKILL what is left after ``grace``."""
    sid = proc.pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        for pid in session_members(sid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, so it does not linger as a zombie
            if not session_members(sid):
                break
            time.sleep(0.1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
    left = session_members(sid)
    if left:
        raise RuntimeError(f"processes {left} of session {sid} survived SIGKILL")


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as exc:
        return f"({path}: {exc})"


# -- Airflow ---------------------------------------------------------------------------------


@dataclass
class LiveAirflow:
    """A running Airflow: its home, its API's base URL, its processes and their logs."""

    home: Path
    env: dict[str, str]
    url: str = ""
    port: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    token: str = ""

    @classmethod
    def start(cls, home: Path, dags: Path, extra_env: Mapping[str, str],
              timeout: float = 120.0) -> LiveAirflow:
        """Migrate a fresh metadata DB under ``home``, start the API server on a free port,
        then the scheduler and the DAG processor; return once all report healthy. On any
        failure everything started so far is stopped and the error names the logs."""
        home.mkdir(parents=True, exist_ok=True)
        # our own settings only: not those another test of the session put in os.environ
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("AIRFLOW", "CDCLAKE_"))}
        env = {**base, **extra_env,
               "AIRFLOW_HOME": str(home),
               "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
               "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
               "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
               # two cores: a chain of tasks needs one slot, two leave room for a retry
               "AIRFLOW__CORE__PARALLELISM": "2",
               "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple."
                                              "simple_auth_manager.SimpleAuthManager",
               "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
               # every component signs or checks the same tokens
               "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
               "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
               # the test triggers the runs: no scheduled run may start behind its back
               "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
               "AIRFLOW__API__WORKERS": "1",
               "AIRFLOW__API__HOST": "127.0.0.1"}
        airflow = cls(home, env)
        try:
            # cwd: the home, so that no relative path of theirs lands in the checkout
            migrate = subprocess.run([str(AIRFLOW), "db", "migrate"], env=env, cwd=home,
                                     capture_output=True, text=True, timeout=300)
            if migrate.returncode != 0:
                raise RuntimeError(f"airflow db migrate failed ({migrate.returncode}):\n"
                                   f"{migrate.stdout[-3000:]}\n{migrate.stderr[-3000:]}")
            airflow._start_api_server(timeout)
            for name in COMPONENTS:
                args = [name, "--skip-serve-logs"] if name == "scheduler" else [name]
                airflow._spawn(name, args)
            airflow.wait_healthy(timeout)
            airflow.token = airflow.call("GET", "/auth/token", auth=False)["access_token"]
        except BaseException:
            airflow.stop()
            raise
        return airflow

    def _spawn(self, name: str, args: list[str]) -> None:
        log = self.home / f"{name}.log"
        with open(log, "ab") as out:  # to a file: nobody drains a pipe
            self.processes[name] = subprocess.Popen(
                [str(AIRFLOW), *args], env=self.env, cwd=self.home, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _start_api_server(self, timeout: float) -> None:
        """On a free port; another one if that was taken between choosing and binding."""
        errors = []
        for _ in range(3):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.env["AIRFLOW__API__PORT"] = str(self.port)
            self.env["AIRFLOW__API__BASE_URL"] = self.url
            self.env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{self.url}/execution/"
            self._spawn("api-server", ["api-server", "--port", str(self.port),
                                       "--host", "127.0.0.1"])
            proc = self.processes["api-server"]
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and proc.poll() is None:
                with contextlib.suppress(OSError, AirflowApiError):
                    self.call("GET", "/api/v2/monitor/health", auth=False, timeout=5)
                    return
                time.sleep(0.5)
            errors.append(f"port {self.port}: " + (
                f"exited with {proc.returncode}" if proc.poll() is not None
                else f"no answer within {timeout:.0f}s"))
            stop_session(self.processes.pop("api-server"))
        raise RuntimeError(f"the Airflow API server did not start ({'; '.join(errors)}):\n"
                           f"{tail(self.home / 'api-server.log')}")

    # -- REST API ------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, *, auth: bool = True,
             timeout: float = 30.0) -> Any:
        """One REST call; its JSON answer. HTTP errors raise AirflowApiError with the body."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raise AirflowApiError(f"{method} {path}: HTTP {exc.code}: "
                                  f"{exc.read().decode(errors='replace')[:3000]}") from exc
        return json.loads(text) if text else None

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        health: Any = None
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(OSError, AirflowApiError):
                health = self.call("GET", "/api/v2/monitor/health", auth=False, timeout=5)
                if all((health.get(part) or {}).get("status") == "healthy"
                       for part in ("metadatabase", "scheduler", "dag_processor")):
                    return
            time.sleep(1)
        raise RuntimeError(f"Airflow not healthy within {timeout:.0f}s: {health}\n"
                           f"{self.diagnostics()}")

    def check_alive(self) -> None:
        """Raise, with its log, if one of the components died."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(f"airflow {name} exited with {proc.returncode}:\n"
                                   f"{tail(self.home / f'{name}.log')}")

    def wait_for_dag(self, dag_id: str, timeout: float) -> dict[str, Any]:
        """The DAG as the API serves it once the DAG processor parsed it; its import errors
        fail at once."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            errors = self.call("GET", "/api/v2/importErrors")
            if errors["total_entries"]:
                raise RuntimeError("the dags folder has import errors:\n" + "\n".join(
                    f"{e['filename']}: {e['stack_trace']}" for e in errors["import_errors"]))
            with contextlib.suppress(AirflowApiError):
                dag: dict[str, Any] = self.call("GET", f"/api/v2/dags/{dag_id}")
                return dag
            if time.monotonic() > deadline:
                raise RuntimeError(f"DAG {dag_id} not parsed within {timeout:.0f}s\n"
                                   f"{self.diagnostics()}")
            time.sleep(1)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float,
                     on_poll: Callable[[], None] | None = None) -> dict[str, Any]:
        """The DAG run once it ended (success or failed), or TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            run: dict[str, Any] = self.call(
                "GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}")
            if run["state"] in ("success", "failed"):
                return run
            if on_poll is not None:
                on_poll()
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {run['state']} after {timeout:.0f}s; "
                                   f"tasks: {self.task_states(dag_id, run_id)}\n"
                                   f"{self.diagnostics()}")
            time.sleep(2)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        answer = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/"
                                  f"{urllib.parse.quote(run_id)}/taskInstances")
        return list(answer["task_instances"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {t["task_id"]: t["state"] for t in self.task_instances(dag_id, run_id)}

    # -- diagnosis and shutdown -----------------------------------------------------------

    def task_logs(self) -> Iterator[Path]:
        """Task log files, oldest first."""
        yield from sorted((self.home / "logs").rglob("*.log"), key=lambda p: p.stat().st_mtime)

    def diagnostics(self) -> str:
        """The tails of the components' logs and of the latest task log."""
        parts = [f"--- {name} ({self.home / f'{name}.log'}):\n"
                 f"{tail(self.home / f'{name}.log', 2500)}" for name in self.processes]
        logs = list(self.task_logs())
        if logs:
            parts.append(f"--- latest task log ({logs[-1]}):\n{tail(logs[-1], 6000)}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop every process of every component (tasks and their JVMs included)."""
        errors = []
        for name in list(self.processes):
            try:
                stop_session(self.processes.pop(name))
            except RuntimeError as exc:
                errors.append(f"{name}: {exc}")
        if errors:
            raise RuntimeError("; ".join(errors))


# -- Chromium ----------------------------------------------------------------------------------


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def install_chromium() -> tuple[str | None, str]:
    """Install Debian's ``chromium`` as infra/bootstrap.sh does, if this user can: the
    binary, or None and why not."""
    apt = shutil.which("apt-get")
    if apt is None:
        return None, "there is no apt-get on this system to install it with"
    sudo: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None or subprocess.run(
                ["sudo", "-n", "true"], capture_output=True).returncode != 0:
            return None, "installing it needs root (run infra/bootstrap.sh as root)"
        sudo = ["sudo", "-n"]
    install = [*sudo, apt, "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq",
               "--no-install-recommends", "chromium"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode != 0:  # perhaps stale package lists
        subprocess.run([*sudo, apt, "update", "-qq"], capture_output=True, env=env)
        done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return None, f"`apt-get install chromium` failed: {done.stderr.strip()[-500:]}"
    return find_chromium(), "apt-get install chromium"


class BrowserError(RuntimeError):
    """The browser died, timed out, or a page did not show what was awaited."""


class Chromium:
    """Headless Chromium and one page, over the DevTools protocol on a pipe."""

    def __init__(self, binary: str, profile: Path, log: Path, width: int = 1600,
                 height: int = 1000) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        commands_r, self._commands = os.pipe()
        self._replies, replies_w = os.pipe()
        # the child wants them as fds 3 and 4: first move them clear of 3 and 4
        child_r = fcntl.fcntl(commands_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(replies_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(commands_r)
        os.close(replies_w)

        def wire_pipe() -> None:
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        args = [binary, "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-gpu",
                "--disable-dev-shm-usage", "--disable-extensions", "--hide-scrollbars",
                "--mute-audio", f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to sandbox as root
        with open(log, "ab") as out:
            self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, close_fds=False,
                                            preexec_fn=wire_pipe, start_new_session=True)
        os.close(child_r)
        os.close(child_w)
        self.log = log
        self._buffer = b""
        self._next_id = 0
        self._session = ""
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self.call("Target.attachToTarget",
                                      {"targetId": target, "flatten": True})["sessionId"]
            self.call("Page.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1,
                       "mobile": False})
        except BaseException:
            self.close()
            raise

    # -- protocol ------------------------------------------------------------------------

    def call(self, method: str, params: Mapping[str, Any] | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": dict(params or {})}
        if self._session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") != self._next_id:
                    continue  # an event, or a reply to a command that timed out
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise BrowserError(f"{method}: no reply within {timeout:.0f}s\n"
                                   f"{tail(self.log, 2000)}")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium exited during {method}:\n{tail(self.log, 2000)}")
            self._buffer += chunk

    def evaluate(self, expression: str, timeout: float = 30.0) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True, "awaitPromise": True},
                           timeout)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:200]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    # -- pages ---------------------------------------------------------------------------

    def goto(self, url: str) -> None:
        answer = self.call("Page.navigate", {"url": url})
        if answer.get("errorText"):
            raise BrowserError(f"cannot load {url}: {answer['errorText']}")

    def text(self) -> str:
        return str(self.evaluate("document.body ? document.body.innerText : ''") or "")

    def wait_for_text(self, needles: list[str], timeout: float = 60.0) -> str:
        """The page's visible text once it holds every one of ``needles``."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            missing = [n for n in needles if n not in text]
            if not missing:
                return text
            if time.monotonic() > deadline:
                raise BrowserError(f"after {timeout:.0f}s the page "
                                   f"{self.evaluate('location.href')} still lacks {missing}; "
                                   f"it shows:\n{text[:3000]}")
            time.sleep(0.5)

    def wait_for(self, expression: str, what: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"after {timeout:.0f}s still no {what}; the page shows:\n"
                                   f"{self.text()[:3000]}")
            time.sleep(0.5)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until no finite CSS animation or transition runs (a dialog fading in), then
        for two frames to be painted: a screenshot taken earlier shows a blend of pages."""
        self.wait_for("""!document.getAnimations().some(a => a.playState === "running"
                          && isFinite(a.effect?.getComputedTiming().endTime ?? Infinity))""",
                      "end of the page's animations", timeout)
        self.evaluate("new Promise(done => requestAnimationFrame("
                      "() => requestAnimationFrame(() => done(true))))")

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the viewport, once the page stopped moving; also written to ``path``."""
        self.settle()
        data = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
        path.write_bytes(data)
        return data

    def picture_stats(self, png: bytes) -> dict[str, float]:
        """Decode ``png`` with the browser's own decoder: its size, how many distinct colours
        it has and what share of its pixels are not the background (the commonest colour)."""
        encoded = base64.b64encode(png).decode()
        return dict(self.evaluate(f"""(async () => {{
            const image = new Image();
            image.src = "data:image/png;base64,{encoded}";
            await image.decode();
            const canvas = document.createElement("canvas");
            canvas.width = image.width; canvas.height = image.height;
            const context = canvas.getContext("2d");
            context.drawImage(image, 0, 0);
            const pixels = context.getImageData(0, 0, image.width, image.height).data;
            const counts = new Map();
            for (let i = 0; i < pixels.length; i += 4) {{
                const rgb = (pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2];
                counts.set(rgb, (counts.get(rgb) || 0) + 1);
            }}
            const background = Math.max(...counts.values());
            return {{width: image.width, height: image.height, colours: counts.size,
                     foreground: 1 - background / (pixels.length / 4)}};
        }})()""", timeout=60))

    def close(self) -> None:
        with contextlib.suppress(OSError, BrowserError):
            if self.process.poll() is None:
                self._session = ""
                self.call("Browser.close", timeout=5)
        for fd in (self._commands, self._replies):
            with contextlib.suppress(OSError):
                os.close(fd)
        stop_session(self.process, grace=5.0)
