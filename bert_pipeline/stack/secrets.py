"""The production profile's generated secrets, HOME/stack/secrets.json (mode 0600): the PostgreSQL password, the
Redis password, and the keys every Airflow component must share (JWT secret, API secret key, Fernet key).

Made once, by the first `up`, and kept: the database's password lives in its data directory, and Airflow's
connections are encrypted with the Fernet key. They reach the services through their environment only, never a
command line (which `ps` and state.json show).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path

from bert_core.errors import BertPipelineError

NAMES = ("postgres_password", "redis_password", "jwt_secret", "api_secret_key", "fernet_key")


def _new(name: str) -> str:
    if name == "fernet_key":  # Fernet's format: 32 random bytes, url-safe base64
        return base64.urlsafe_b64encode(os.urandom(32)).decode()
    return secrets.token_urlsafe(24)


def path(home: Path) -> Path:
    return home / "stack" / "secrets.json"


def load(home: Path) -> dict[str, str] | None:
    """The stored secrets, or None when none were made yet."""
    file = path(home)
    if not file.is_file():
        return None
    try:
        stored = json.loads(file.read_text())
    except ValueError as exc:
        raise BertPipelineError(f"{file}: unreadable ({exc}); it holds the stack's database password") from None
    missing = [name for name in NAMES if not stored.get(name)]
    if missing:
        raise BertPipelineError(f"{file}: missing {', '.join(missing)}")
    return stored


def load_or_create(home: Path) -> dict[str, str]:
    """The stored secrets; made (and written, 0600, atomically) on the first call."""
    stored = load(home)
    if stored is not None:
        return stored
    made = {name: _new(name) for name in NAMES}
    file = path(home)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(made, indent=2) + "\n")
    os.replace(tmp, file)
    return made
