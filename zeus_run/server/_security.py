"""The operator's token and where the server may listen.

* Every request but ``GET /v1/health`` needs ``Authorization: Bearer TOKEN``:
  the operator's token, compared with `hmac.compare_digest` (constant time),
  or a job's token (`zeus_run.server._tokens`).
* ``--token-file F``: the operator's token is F's content (a Kubernetes
  secret, say); the server may then bind any address.
* No token file: the server binds loopback only, and uses the random token
  kept in ``ROOT/.serve.token`` (mode 0600) for local clients
  (``ZEUS_SERVER_TOKEN_FILE``), made on the first start and reused on every
  later one, so that a restart breaks no client.
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
    if not _usable(raw, token):
        raise UsageError(
            f"--token-file {str(p)!r} must hold one token of {MIN_TOKEN_CHARS}+ characters without spaces "
            "(e.g. made with: python -c 'import secrets; print(secrets.token_urlsafe(32))' > token)."
        )
    if mode & stat.S_IROTH:
        logger.warning("token file %s is readable by every user; chmod o-r it", p)
    return token


def local_token(root: Path, name: str) -> tuple[str, Path, bool]:
    """The operator's token kept in ``root/name``: reused if the file holds one, else made (mode 0600, no links
    followed). Returns the token, the file and whether it was made now.

    A file that is not a regular file of this user, or whose content is no token, is replaced with a new token
    (logged); a file others may read is made private again (``chmod 600``, logged).
    """
    path = root / name
    try:
        fd = _fs.open_fd(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        logger.warning("%s cannot be used as the token file (%s); making a new token", path, exc.strerror or exc)
        fd = -1
    if fd >= 0:
        try:
            st = os.fstat(fd)
            raw = os.read(fd, MAX_TOKEN_BYTES + 1)
            if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, 0o600)
                logger.warning("%s was readable by others: made private again (chmod 600)", path)
        finally:
            os.close(fd)
        token = raw.decode("utf-8", "replace").strip()
        if st.st_uid == os.getuid() and _usable(raw, token):
            return token, path, False
        logger.warning("%s holds no usable token (or is not this user's); making a new token", path)
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(path.name + ".tmp")
    for stale in (tmp, path):
        try:
            os.unlink(stale)
        except FileNotFoundError:
            pass
    fd = _fs.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _fs.write_all(fd, (token + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return token, path, True


def _usable(raw: bytes, token: str) -> bool:
    return len(raw) <= MAX_TOKEN_BYTES and len(token) >= MIN_TOKEN_CHARS and not any(c.isspace() for c in token)


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
