"""A double of zeusd's HTTP API on a Unix socket, built from zeusd 0.5.0's docs/zeusd/api.md.

`FakeZeusd(socket_path, nvml)` serves, in a thread, what zeus-run calls:

- ``GET /discover``
- ``POST /gpu/set_power_limit?gpu_ids=..&power_limit_mw=..&block=true``
- ``POST /gpu/set_persistence_mode?gpu_ids=..&enabled=true|false&block=true``

It sets the GPUs of ``nvml`` (a `tests.fake_nvml.FakeNvml`) as root would, so an unprivileged
NVML double beside it sees the limits change. Knobs reproduce the documented failures: ``token``
(401 without ``Authorization: Bearer``), ``nvml_no_permission`` (403), ``gpu_control=False``
(404: the API group is disabled); an unknown GPU index answers 400 ``GPU index N does not
exist.`` and an NVML invalid argument 400 ``{"errors": {"0": "NVML error: ..."}}``.
Every write is appended to ``requests`` as ``(path, params)``.
"""

from __future__ import annotations

import json
import socketserver
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any


class FakeZeusd:
    def __init__(
        self,
        socket_path: str,
        nvml: Any,
        *,
        token: str | None = None,
        nvml_no_permission: bool = False,
        gpu_control: bool = True,
    ) -> None:
        self.socket_path = socket_path
        self.nvml = nvml
        self.token = token
        self.nvml_no_permission = nvml_no_permission
        self.gpu_control = gpu_control
        self.requests: list[tuple[str, dict[str, str]]] = []
        daemon = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                daemon._handle(self, "GET")

            def do_POST(self) -> None:
                daemon._handle(self, "POST")

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(socket_path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-zeusd", daemon=True)

    def __enter__(self) -> FakeZeusd:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the API ------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(h.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/discover" and method == "GET":
            gpus = [
                {"id": i, "name": g.name, "pci_address": f"0000:{i:02x}:00.0", "cumulative_energy_available": True}
                for i, g in enumerate(self.nvml.gpus)
            ]
            groups = ["gpu-read"] + (["gpu-control"] if self.gpu_control else [])
            return self._reply(
                h, 200, {"gpus": gpus, "cpus": [], "enabled_api_groups": groups, "auth_required": bool(self.token)}
            )
        if not url.path.startswith("/gpu/set_") or method != "POST" or not self.gpu_control:
            return self._reply(h, 404, None)
        if self.token is not None and h.headers.get("Authorization") != f"Bearer {self.token}":
            return self._reply(h, 401, "Authentication required.")
        self.requests.append((url.path, params))
        try:
            ids = [int(x) for x in params["gpu_ids"].split(",")]
        except (KeyError, ValueError):
            return self._reply(h, 400, "Invalid GPU index")
        for i in ids:
            if i >= len(self.nvml.gpus):
                return self._reply(h, 400, f"GPU index {i} does not exist.")
        if self.nvml_no_permission:
            return self._reply(h, 403, {"errors": {str(i): "NVML error: Insufficient Permissions" for i in ids}})
        errors = {}
        for i in ids:
            try:
                if url.path == "/gpu/set_power_limit":
                    self._as_root(self.nvml.nvmlDeviceSetPowerManagementLimit, i, int(params["power_limit_mw"]))
                elif url.path == "/gpu/set_persistence_mode":
                    self._as_root(
                        self.nvml.nvmlDeviceSetPersistenceMode, i, 1 if params.get("enabled") == "true" else 0
                    )
                else:
                    return self._reply(h, 404, None)
            except Exception as exc:
                errors[str(i)] = f"NVML error: {exc}"
        if errors:
            return self._reply(h, 400, {"errors": errors})
        return self._reply(h, 200, None)

    def _as_root(self, call: Any, *args: Any) -> None:
        was, self.nvml.root = self.nvml.root, True  # zeusd runs as root
        try:
            call(*args)
        finally:
            self.nvml.root = was

    @staticmethod
    def _reply(h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = b"" if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
        h.send_response(status)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
