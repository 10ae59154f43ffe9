"""Idempotency keys: a retried ask, report or tell returns the answer of the request it repeats.

A client that sent a request and lost the answer (the server restarted, the
connection dropped) sends it again with the same key. Each key is stored in
the same durable write as the effect it belongs to, so that a crash cannot
keep one without the other:

* an ask: in its marker in ``running.json`` (``request_key``), for as long as
  it is in flight (a key whose ask is no longer in flight asks anew);
* an epoch report: in its line of the trial's ``events.jsonl`` (``key``);
* a tell: in its record in ``history.jsonl`` (``provenance.tell_key``).

What is stored is ``KEY#FINGERPRINT``: the fingerprint (a hash of what the
request asked for) tells a true retry from a different request that reuses
a key, which is refused (`zeus_run.errors.KeyReused`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from zeus_run.errors import KeyReused, UsageError

#: Longest idempotency key (unit: characters).
MAX_KEY = 200


def check_key(key: str) -> str:
    """Return ``key`` if it is a usable idempotency key (1-200 printable ASCII characters, no spaces or ``#``).

    Raises:
        UsageError: It is not.
    """
    if not 0 < len(key) <= MAX_KEY or not all(33 <= ord(c) < 127 and c != "#" for c in key):
        raise UsageError(
            f"idempotency key = {key[:40]!r}: use 1-{MAX_KEY} printable ASCII characters without spaces or '#' "
            "(a UUID, say), and send the same key again only to retry the same request."
        )
    return key


def stamp(key: str, kind: str, request: Mapping[str, object]) -> str:
    """What is stored with the effect: ``KEY#FINGERPRINT`` of a ``kind`` request (ask, epoch, finish, fail)."""
    body = json.dumps({"kind": kind, **request}, sort_keys=True, separators=(",", ":"), default=str)
    return f"{check_key(key)}#{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def same_key(stored: object, new: str | None, what: str) -> bool:
    """Whether the stored stamp is this request's key (True: a retry to answer as before).

    Raises:
        KeyReused: The key is the same, the request is not.
    """
    if new is None or not isinstance(stored, str):
        return False
    key, _, _ = new.partition("#")
    if stored.partition("#")[0] != key:
        return False
    if stored != new:
        raise KeyReused(
            f"idempotency key = {key[:40]!r} was used for another request ({what}) with other contents; nothing "
            "was done. Use a fresh key for each new request and the same one only to retry it unchanged."
        )
    return True
