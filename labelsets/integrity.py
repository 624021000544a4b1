"""Keyed seals for the trusted inputs: study plans and label sets.

A plan is code (its tasks name the verifier commands ``oracle run`` executes) and a label set
is the data every result is computed from; both are sealed by a SHA-256 of their content,
which detects corruption and accidental edits but not a forger, who can recompute it. So
both are **trusted inputs**: run a plan and read a label set only from a source you trust.

For files that travel through hands you do not trust, set a signing key: the text of
``RIPPLECP_SIGNING_KEY`` or the bytes of the file ``RIPPLECP_SIGNING_KEY_FILE`` (at least
:data:`MIN_KEY_BYTES` bytes; keep it secret). Then every plan and label set written carries
``hmac``, an HMAC-SHA256 of its content hash under that key (stdlib :mod:`hmac`), and every
one read must carry a valid one: a file edited and resealed by anyone without the key is
refused. Without a key nothing changes (a signed file still loads; its hmac is not checked).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from pathlib import Path

__all__ = ["KEY_ENV", "KEY_FILE_ENV", "MIN_KEY_BYTES", "keyed_seal", "signing_key",
           "verify_seal"]

KEY_ENV = "RIPPLECP_SIGNING_KEY"
KEY_FILE_ENV = "RIPPLECP_SIGNING_KEY_FILE"
MIN_KEY_BYTES = 16
_HEX64 = re.compile(r"[0-9a-f]{64}")


def signing_key() -> bytes | None:
    """The user's signing key (module doc), or None when none is set; a key that is too
    short or a key file that cannot be read is a one-line ``ValueError`` naming it."""
    text = os.environ.get(KEY_ENV)
    path = os.environ.get(KEY_FILE_ENV)
    if text and path:
        raise ValueError(f"set one of {KEY_ENV} and {KEY_FILE_ENV}, not both")
    if path:
        try:
            key = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"{KEY_FILE_ENV}={path}: cannot read the signing key: "
                             f"{exc.strerror or exc}") from None
        where = f"{KEY_FILE_ENV}={path}"
    elif text:
        key, where = text.encode(), KEY_ENV
    else:
        return None
    if len(key.strip()) < MIN_KEY_BYTES:
        raise ValueError(f"{where}: a signing key needs at least {MIN_KEY_BYTES} bytes")
    return key


def keyed_seal(kind: str, content_hash: str, key: bytes) -> str:
    """HMAC-SHA256 under ``key`` of a ``kind`` (``"plan"``, ``"label_set"``) with
    ``content_hash``: the ``hmac`` field such a file carries."""
    return hmac.new(key, f"ripplecp {kind}\0{content_hash}".encode(), hashlib.sha256).hexdigest()


def verify_seal(kind: str, content_hash: str, seal: object, where: str) -> str | None:
    """Check a file's ``hmac`` field ``seal`` when a signing key is set; returns the problem
    (naming ``where`` and the field) or None when it is fine or no key is set."""
    key = signing_key()
    if key is None:
        return None
    if seal is None:
        return (f"{where}: field 'hmac' is missing: {KEY_ENV or KEY_FILE_ENV} is set, so "
                "only files signed with that key are read (this one is unsigned, or was "
                "resealed without the key)")
    if not (isinstance(seal, str) and _HEX64.fullmatch(seal)):
        return f"{where}: field 'hmac': {seal!r} is not an HMAC-SHA256"
    if not hmac.compare_digest(seal, keyed_seal(kind, content_hash, key)):
        return (f"{where}: field 'hmac' does not match: the file was edited after it was "
                "signed, or signed with another key")
    return None
