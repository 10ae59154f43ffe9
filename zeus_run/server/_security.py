"""The server's bearer token and where it may listen.

* Every request but ``GET /v1/health`` needs ``Authorization: Bearer TOKEN``;
  tokens are compared with `hmac.compare_digest` (constant time).
* ``--token-file F``: the token is F's content (a Kubernetes secret, say); the
  server may then bind any address.
* No token file: the server binds loopback only, and makes a random token
  that it writes to ``ROOT/.serve.token`` (mode 0600) for local clients
  (``ZEUS_SERVER_TOKEN_FILE``).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import stat
from pathlib import Path

from zeus_run import _fs
from zeus_run.errors import UsageError

logger = logging.getLogger(__name__)

#: Shortest token accepted from a token file (unit: characters).
MIN_TOKEN_CHARS = 16
MAX_TOKEN_BYTES = 4096


def tokens_equal(given: str, expected: str) -> bool:
    """Compare two tokens in constant time (for equal lengths)."""
    return hmac.compare_digest(given.encode(), expected.encode())


def read_token_file(path: str | Path) -> str:
    """Read the server's token from ``path``.

    Raises:
        UsageError: The file is missing, unreadable, empty, too short or too big.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
            mode = os.fstat(f.fileno()).st_mode
    except OSError as exc:
        raise UsageError(f"Cannot read --token-file {str(p)!r}: {exc.strerror or exc}.") from None
    token = raw.decode("utf-8", "replace").strip()
    if len(raw) > MAX_TOKEN_BYTES or len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise UsageError(
            f"--token-file {str(p)!r} must hold one token of {MIN_TOKEN_CHARS}+ characters without spaces "
            "(e.g. made with: python -c 'import secrets; print(secrets.token_urlsafe(32))' > token)."
        )
    if mode & stat.S_IROTH:
        logger.warning("token file %s is readable by every user; chmod o-r it", p)
    return token


def local_token(root: Path, name: str) -> tuple[str, Path]:
    """Make a fresh random token and write it to ``root/name`` (mode 0600, no links followed)."""
    token = secrets.token_urlsafe(32)
    path = root / name
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = _fs.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _fs.write_all(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    return token, path


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only the loopback interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, has_token_file: bool) -> None:
    """Refuse a non-loopback bind without a token file.

    Raises:
        UsageError: ``host`` is not loopback and no ``--token-file`` was given.
    """
    if not has_token_file and not is_loopback(host):
        raise UsageError(
            f"--host {host} would serve beyond this machine, which needs a token shared with the clients: pass "
            "--token-file FILE (and put TLS in front, see the README), or bind --host 127.0.0.1."
        )
