"""ADK's own web server (``adk api_server``, ``adk web``) as a real subprocess on a free
loopback port, with an agents directory whose ``services.py`` registers chatledger's
schemes, and an agent on the scripted model (:mod:`tests.support.adk_scripted`): no
network, no Gemini.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The agents directory's ``services.py``, as docs/adk.md gives it.
SERVICES_PY = """\
import chatledger.adk

chatledger.adk.register()
"""

#: The agent: ADK's LlmAgent on the scripted model, which answers every turn with REPLY.
AGENT_PY = """\
from google.adk.agents import LlmAgent

from tests.support.adk_scripted import ScriptedLlm, text

REPLY = {reply!r}

# One answer a turn, for more turns than a test takes.
root_agent = LlmAgent(
    name={app!r}, model=ScriptedLlm(replies=[text(REPLY) for _ in range(100)]), instruction="Answer."
)
"""


def agents_dir(root: Path, app: str, reply: str) -> Path:
    """An agents directory holding ``services.py`` and one agent named ``app``."""
    agents = root / "agents"
    (agents / app).mkdir(parents=True)
    (agents / "services.py").write_text(SERVICES_PY, encoding="utf-8")
    (agents / app / "__init__.py").write_text("from . import agent\n", encoding="utf-8")
    (agents / app / "agent.py").write_text(AGENT_PY.format(app=app, reply=reply), encoding="utf-8")
    return agents


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    """A running ADK server: its base URL, and JSON requests to it."""

    def __init__(self, base: str, process: subprocess.Popen[str], log: Path) -> None:
        self.base, self.process, self.log = base, process, log

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {path}: {error.code} {error.read()!r}\n{self.output()}") from None

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:]


@contextmanager
def adk_server(
    command: str, agents: Path, session_uri: str, *, extra: tuple[str, ...] = ()
) -> Iterator[Server]:
    """``adk COMMAND`` (``api_server`` or ``web``) on a free loopback port, serving
    ``agents`` with ``--session_service_uri session_uri``; stopped afterwards. Waits
    (polling, up to ten minutes: ADK's imports are slow on a busy machine) for it to
    answer ``/list-apps``."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in ("CHATLEDGER_DSN",)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["ADK_DISABLE_LOCAL_STORAGE"] = "1"  # nothing written under the agents directory
    log = agents.parent / f"adk-{command}.log"
    args = [sys.executable, "-m", "google.adk.cli", command, "--host", "127.0.0.1", "--port", str(port)]
    args += ["--session_service_uri", session_uri, "--no-reload", *extra, str(agents)]
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        for _ in range(1200):
            if process.poll() is not None:
                raise AssertionError(f"adk {command} exited {process.returncode}:\n{server.output()}")
            try:
                with urllib.request.urlopen(server.base + "/list-apps", timeout=5):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        else:
            raise AssertionError(f"adk {command} did not answer:\n{server.output()}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def session_uri(url_text: str) -> str:
    """ADK's ``--session_service_uri`` for chatledger's database at ``url_text``."""
    return "chatledger+" + url_text
