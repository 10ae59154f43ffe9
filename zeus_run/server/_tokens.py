"""Per-job credentials: a job token acts on its own job only; the operator's token administers every job.

Who holds what:

* the **operator's token** (``--token-file``, or the one the server keeps in ``ROOT/.serve.token``) may do
  everything: register any job, read every job, delete jobs, and hand out job tokens;
* a **job token** (``zrj_...``) is handed out once, in the answer that registers its job (``job_token``), or by
  ``zeus-run serve tokens rotate``; it asks, reports, tells, heartbeats, cancels, reads the history and
  re-registers the spec of its own job, and nothing else (403 for any other job; a listing shows only its job).

Only each token's SHA-256 is kept, in ``ROOT/.serve.tokens.json`` (mode 0600): a copy of the root gives no
working token. A job token carries 256 random bits, so one fast hash is the right check (a slow password
hash protects guessable secrets; these are not). The server looks a token up by its hash, in a table it
reads again when the file changes (`TokenStore.job_of`): ``rotate`` and ``revoke`` take effect on a running
server, in every worker process, within `RECHECK_S`. Logs name a token by its short id (`short_id`: the first
8 hex digits of its hash), never by the token.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zeus_run import _fs
from zeus_run.errors import UsageError

TOKENS_NAME = ".serve.tokens.json"
_LOCK_NAME = ".serve.tokens.lock"
#: Every job token starts with this (so a secret scanner, and a reader of a config file, can tell one).
JOB_TOKEN_PREFIX = "zrj_"
#: Hex digits of a token's hash that name it in logs and listings.
SHORT_ID_CHARS = 8
#: Longest a running server goes on with a token table it has read (unit: s): a revoked token stops
#: working within this; a new token (rotate) works at once (an unknown token makes the table be read again).
RECHECK_S = 1.0
#: Largest token file read (unit: bytes): a hash and a date per job.
_MAX_BYTES = 16 << 20


def digest(token: str) -> str:
    """The SHA-256 of ``token`` (hex): what the store keeps."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def short_id(token: str) -> str:
    """A token's name in logs and listings: the first `SHORT_ID_CHARS` hex digits of its hash."""
    return digest(token)[:SHORT_ID_CHARS]


def new_job_token() -> str:
    """A fresh job token: the prefix and 256 random bits."""
    return JOB_TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class JobToken:
    """One job's credential as stored (never the token itself).

    Attributes:
        job: The job it acts on.
        id: Its short id (`short_id`).
        sha256: The token's SHA-256 (hex).
        created_at: When it was made (ISO 8601, UTC).
    """

    job: str
    id: str
    sha256: str
    created_at: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "sha256": self.sha256, "created_at": self.created_at}


class TokenStore:
    """The job tokens of one server root (``ROOT/.serve.tokens.json``).

    Safe to use from several processes at once (the server's workers and ``zeus-run serve tokens``): each change
    is a read, change and atomic replace under an ``flock`` of its own.

    Args:
        root: The server's root directory.
    """

    def __init__(self, root: Path) -> None:
        self.path = root / TOKENS_NAME
        self._lock_path = root / _LOCK_NAME
        self._by_hash: dict[str, JobToken] = {}
        #: Tokens already checked against the table read (emptied whenever it is read again): a request's check
        #: is then one dict lookup, not a hash (NOTE: valid tokens only, so at most one entry per job).
        self._seen: dict[str, JobToken] = {}
        self._version: tuple[int, int, int] | None = None
        self._checked = -float("inf")

    # -- the server's check ---------------------------------------------------------------------------------
    def job_of(self, token: str) -> JobToken | None:
        """The job token ``token`` is, or None (not a job token, or revoked).

        Looked up by hash; the table is read again when the file changed (checked at most every `RECHECK_S`
        for a token found, at once for one not found).
        """
        if not token.startswith(JOB_TOKEN_PREFIX):
            return None
        now = time.monotonic()
        if now - self._checked > RECHECK_S:
            self._refresh(now)
        seen = self._seen.get(token)
        if seen is not None:
            return seen
        h = digest(token)
        hit = self._by_hash.get(h)
        if hit is None and self._refresh(now):
            hit = self._by_hash.get(h)
        # NOTE: the lookup is by the hash of a 256-bit secret, so its timing tells nothing of the token;
        # the compare is constant-time all the same.
        if hit is None or not hmac.compare_digest(hit.sha256, h):
            return None
        if len(self._seen) < 2 * len(self._by_hash) + 16:
            self._seen[token] = hit
        return hit

    def _refresh(self, now: float) -> bool:
        """Read the table again if the file changed; whether it did."""
        self._checked = now
        try:
            st = os.stat(self.path)
            version: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            version = None
        if version == self._version:
            return False
        self._by_hash = {t.sha256: t for t in self._read().values()}
        self._seen = {}
        self._version = version
        return True

    # -- the operator's commands ----------------------------------------------------------------------------
    def tokens(self) -> list[JobToken]:
        """Every job's token as stored, by job name."""
        return sorted(self._read().values(), key=lambda t: t.job)

    def of_job(self, job: str) -> JobToken | None:
        return self._read().get(job)

    def rotate(self, job: str) -> tuple[str, JobToken]:
        """Make a new token for ``job`` (its old one, if any, stops working); returns the token, shown only now."""
        with self._locked() as table:
            token = new_job_token()
            table[job] = _entry(job, token)
            self._write(table)
        return token, table[job]

    def ensure(self, job: str) -> tuple[str, JobToken] | None:
        """A token for ``job`` if it has none yet (returned once); None if it has one."""
        with self._locked() as table:
            if job in table:
                return None
            token = new_job_token()
            table[job] = _entry(job, token)
            self._write(table)
        return token, table[job]

    def revoke(self, job: str) -> JobToken | None:
        """Remove ``job``'s token (it stops working); the token removed, or None if it had none."""
        with self._locked() as table:
            gone = table.pop(job, None)
            if gone is not None:
                self._write(table)
        return gone

    # -- the file -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, JobToken]]:
        fd = _fs.open_fd(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self._read()
        finally:
            os.close(fd)

    def _read(self) -> dict[str, JobToken]:
        try:
            with _fs.open_read(self.path) as f:
                raw = _fs.read_at_most(f, _MAX_BYTES + 1)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise UsageError(f"Cannot read the job tokens {str(self.path)!r}: {exc.strerror or exc}.") from None
        try:
            doc = json.loads(raw)
            return {
                job: JobToken(job, str(t["id"]), str(t["sha256"]), str(t["created_at"]))
                for job, t in doc["tokens"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError):
            raise UsageError(
                f"The job tokens {str(self.path)!r} are damaged (not the JSON zeus-run writes). Restore the file "
                "from a backup, or remove it and hand out new job tokens (zeus-run serve tokens rotate)."
            ) from None

    def _write(self, table: dict[str, JobToken]) -> None:
        doc = {"version": 1, "tokens": {job: t.to_json() for job, t in sorted(table.items())}}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = _fs.open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _fs.write_all(fd, (json.dumps(doc, indent=1) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self._checked = -float("inf")  # this process reads its own change at once


def _entry(job: str, token: str) -> JobToken:
    h = digest(token)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return JobToken(job, h[:SHORT_ID_CHARS], h, now)
