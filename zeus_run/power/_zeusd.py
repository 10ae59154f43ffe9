"""Setting GPU power limits without root, through zeusd (the Zeus daemon) over its Unix socket.

zeusd (github.com/ml-energy/zeus, ``zeusd/``) is a small privileged daemon that sets GPU
knobs for unprivileged processes. zeus-run follows **zeusd 0.5.0** (``docs/zeusd/api.md`` and
``zeusd/src/routes/gpu.rs`` at ml-energy/zeus commit 75a8b93): HTTP over the Unix socket
(default ``/run/zeusd/zeusd.sock``, or ``ZEUSD_SOCK_PATH``), parameters in the query string:

- ``POST /gpu/set_power_limit?gpu_ids=0,1&power_limit_mw=250000&block=true``
- ``POST /gpu/set_persistence_mode?gpu_ids=0,1&enabled=true&block=true``
- ``GET /discover`` -> ``{"gpus": [{"id": 0, "name": ...}, ...], "enabled_api_groups": [...]}``

``gpu_ids`` are NVML indices on the node (zeusd's own numbering). Status codes: 200 done;
400 bad input (``GPU index N does not exist.``, an NVML invalid argument); 401 a token is
needed (``ZEUSD_TOKEN``, sent as ``Authorization: Bearer``); 403 NVML ``NoPermission`` or a
token without ``gpu-control``; 404 the ``gpu-control`` API group is disabled; 500 a daemon-side
failure. Per-GPU failures of a blocking write come back as ``{"errors": {"<id>": "<message>"}}``.

`ZeusdGpu` is a GPU as `zeus_run.power.PowerLimitController` sees it (a
`zeus_run.device.Gpu`): reads (limits, constraints, persistence mode; unprivileged in NVML)
go to NVML, the two writes go to zeusd. `ZeusdPermissionError` is its "no permission", so
``on_no_permission`` behaves exactly as with NVML directly.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import urllib.parse
from collections.abc import Sequence
from typing import Any

from zeus_run.device import Gpu

#: zeusd's documented default socket.
DEFAULT_SOCKET = "/run/zeusd/zeusd.sock"
#: The environment variables zeusd's own clients read.
SOCKET_ENV = "ZEUSD_SOCK_PATH"
TOKEN_ENV = "ZEUSD_TOKEN"
#: The zeusd version whose API this client follows.
ZEUSD_VERSION = "0.5.0"
#: Seconds to wait for zeusd (a blocking set waits for NVML on every GPU).
TIMEOUT_S = 30.0

HOW_TO_ZEUSD = (
    "zeusd sets limits for unprivileged users: have an administrator run "
    "`sudo zeusd serve --socket-path /run/zeusd/zeusd.sock --socket-permissions 666` "
    "(https://ml.energy/zeus), then set power_limit: {via: zeusd, socket: PATH} or ZEUSD_SOCK_PATH; "
    "or set power_limit.enabled: false to silence this."
)


class ZeusdError(Exception):
    """zeusd could not be reached or refused a request (the message names the socket and the cause)."""


class ZeusdPermissionError(ZeusdError):
    """zeusd (or NVML behind it) refused for lack of permission (HTTP 401/403, or the socket itself)."""


@functools.cache
def _unix_connection() -> Any:
    """An `http.client.HTTPConnection` over a Unix socket (its class made on first use: `http.client` loads `ssl`,
    which every launcher would otherwise pay for at start-up, with or without zeusd)."""
    import http.client

    class UnixHTTPConnection(http.client.HTTPConnection):
        def __init__(self, path: str, timeout: float) -> None:
            super().__init__("localhost", timeout=timeout)
            self.socket_path = path

        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.socket_path)
            except BaseException:
                sock.close()
                raise
            self.sock = sock

    return UnixHTTPConnection


class ZeusdClient:
    """The few zeusd calls zeus-run makes, over a Unix socket."""

    def __init__(self, socket_path: str, token: str | None = None, timeout: float = TIMEOUT_S) -> None:
        self.socket_path = socket_path
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.timeout = timeout

    def request(self, method: str, path: str, params: dict[str, str] | None = None) -> Any:
        """One request; the decoded JSON body (None when empty).

        Raises:
            ZeusdPermissionError: 401, 403, or the socket is not ours to open.
            ZeusdError: Not running, 400, 404, 500, or a malformed answer.
        """
        where = f"zeusd at {self.socket_path}"
        url = path + ("?" + urllib.parse.urlencode(params) if params else "")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        import http.client

        conn = _unix_connection()(self.socket_path, self.timeout)
        try:
            conn.request(method, url, headers=headers)
            resp = conn.getresponse()
            body = resp.read().decode("utf-8", "replace")
        except PermissionError as exc:
            raise ZeusdPermissionError(
                f"{where}: cannot open the socket ({exc.strerror}); zeusd must be started with "
                "--socket-permissions 666 (or --socket-uid/--socket-gid for this user)"
            ) from None
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ZeusdError(f"{where}: zeusd is not running ({exc.strerror})") from None
        except (OSError, http.client.HTTPException) as exc:
            raise ZeusdError(f"{where}: {method} {path} failed ({exc})") from None
        finally:
            conn.close()
        if resp.status == 200:
            try:
                return json.loads(body) if body.strip() else None
            except ValueError:
                raise ZeusdError(f"{where}: {method} {path} answered with non-JSON {body[:200]!r}") from None
        detail = _detail(body)
        if resp.status in (401, 403):
            need = "a token (ZEUSD_TOKEN)" if resp.status == 401 else "permission"
            raise ZeusdPermissionError(f"{where} refused {path} for lack of {need} (HTTP {resp.status}: {detail})")
        if resp.status == 404:
            raise ZeusdError(
                f"{where}: {path} is not served (HTTP 404: {detail}); start zeusd with the gpu-control API group"
            )
        raise ZeusdError(f"{where}: {method} {path} failed (HTTP {resp.status}: {detail})")

    def discover(self) -> dict[str, Any]:
        """``GET /discover``."""
        out = self.request("GET", "/discover")
        if not isinstance(out, dict):
            raise ZeusdError(f"zeusd at {self.socket_path}: /discover answered {out!r}")
        return out

    def set_power_limit(self, gpu_ids: Sequence[int], power_limit_mw: int) -> None:
        """``POST /gpu/set_power_limit`` (blocking)."""
        ids = ",".join(str(i) for i in gpu_ids)
        self.request(
            "POST", "/gpu/set_power_limit", {"gpu_ids": ids, "power_limit_mw": str(power_limit_mw), "block": "true"}
        )

    def set_persistence_mode(self, gpu_ids: Sequence[int], enabled: bool) -> None:
        """``POST /gpu/set_persistence_mode`` (blocking)."""
        ids = ",".join(str(i) for i in gpu_ids)
        self.request(
            "POST",
            "/gpu/set_persistence_mode",
            {"gpu_ids": ids, "enabled": "true" if enabled else "false", "block": "true"},
        )


def _detail(body: str) -> str:
    """zeusd's error text: the per-GPU ``errors`` mapping, or the plain body."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300] or "no detail"
    if isinstance(data, dict) and isinstance(data.get("errors"), dict):
        return "; ".join(f"GPU {k}: {v}" for k, v in sorted(data["errors"].items()))
    return str(data)[:300]


class ZeusdGpu:
    """A `zeus_run.device.Gpu` whose power-limit and persistence writes go to zeusd; reads go to the GPU.

    Args:
        gpu: The GPU through NVML (reads are unprivileged there).
        client: The zeusd client.
    """

    writer = "zeusd"

    def __init__(self, gpu: Gpu, client: ZeusdClient) -> None:
        self._gpu = gpu
        self.client = client
        self.index = gpu.index
        self.name = gpu.name
        self.handle = gpu.handle

    def uuid(self) -> str:
        return self._gpu.uuid()

    def mig_enabled(self) -> bool:
        return self._gpu.mig_enabled()

    def energy_mj(self) -> float:
        return self._gpu.energy_mj()

    def power_mw(self) -> float:
        return self._gpu.power_mw()

    def limit_constraints_mw(self) -> tuple[int, int]:
        return self._gpu.limit_constraints_mw()

    def power_limit_mw(self) -> int:
        return self._gpu.power_limit_mw()

    def persistence_mode(self) -> int | None:
        return self._gpu.persistence_mode()

    def _ids(self) -> list[int]:
        if not self.index.isdigit():
            raise ZeusdError(f"zeusd names GPUs by NVML index, and this job names GPU {self.index!r} by UUID")
        return [int(self.index)]

    def set_power_limit_mw(self, mw: int) -> None:
        self.client.set_power_limit(self._ids(), int(mw))

    def set_persistence_mode(self, enabled: bool) -> None:
        self.client.set_persistence_mode(self._ids(), enabled)

    def is_no_permission(self, exc: BaseException) -> bool:
        return isinstance(exc, ZeusdPermissionError)


def zeusd_socket(via: str, socket_path: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The zeusd socket to use, or None for NVML directly.

    ``via: zeusd`` uses ``socket_path``, else ``ZEUSD_SOCK_PATH``, else zeusd's default;
    ``via: auto`` uses zeusd when ``socket_path`` or ``ZEUSD_SOCK_PATH`` is set; ``via: nvml``
    never does.
    """
    env = os.environ if environ is None else environ
    from_env = env.get(SOCKET_ENV) or None
    if via == "nvml":
        return None
    if via == "zeusd":
        return socket_path or from_env or DEFAULT_SOCKET
    return socket_path or from_env
