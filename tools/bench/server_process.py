"""Server processes for the benchmarks: started in their own session, watched until healthy,
measured (start-up time, resident memory) and stopped however the benchmark ends."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass
class Server:
    """A server process, and what its start-up cost."""

    name: str
    process: subprocess.Popen
    url: str
    log: Path
    healthy_after: float = 0.0  # seconds from launch to /health 200
    rss_bytes: int = 0  # resident memory once healthy, child processes included
    started: float = 0.0  # time.perf_counter() at launch
    rss_after_load: int = 0  # the larger of that and the resident memory after the measured load


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(name: str, command: list[str], port: int, log: Path, stack: ExitStack, timeout: float,
                 env: dict | None = None) -> Server:
    """Launch, wait for /health, record the time and memory. Stopped by `stack` from launch
    on; in its own session, so that a Ctrl-C reaches only this process, which stops it."""
    started = time.perf_counter()
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(name, process, f"http://127.0.0.1:{port}", log, started=started)
    stack.callback(stop_server, server)
    wait_healthy(server, timeout)
    server.healthy_after = time.perf_counter() - started
    server.rss_bytes = resident_bytes(process.pid)
    return server


# A start is measured to this: polled every half second, a 2.6 s start read 2.7 or 3.2 s.
HEALTH_POLL_SECONDS = 0.05


def wait_healthy(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}:\n{log_tail(server.log)}")
        try:
            if httpx.get(server.url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(HEALTH_POLL_SECONDS)
    raise RuntimeError(f"{server.name} not healthy after {timeout:.0f} s:\n{log_tail(server.log)}")


def log_tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def resident_bytes(pid: int) -> int:
    """VmRSS of the process and its descendants, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        children = [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
                    for child in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return 0
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return kib * 1024 + sum(resident_bytes(child) for child in children)


def stop_server(server: Server) -> None:
    """SIGTERM (Flint drains and exits 0), then SIGKILL if it does not go within 30 s."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


def wait_for_log(server: Server, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in server.log.read_text(errors="replace"):
        if server.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} never logged {text!r}:\n{log_tail(server.log)}")
        time.sleep(0.5)


@contextlib.contextmanager
def failure_log(server: Server):
    try:
        yield
    except Exception:
        print(f"{server.name} failed; the end of its log:\n{log_tail(server.log, 40)}", flush=True)
        raise
