"""Incident bundle: the last minutes of state, the log, the audit lines and the config — one file.

A bundle is a recording (see :mod:`.recorder`) with extra tables, so
:class:`~.replay.Replay` opens it like any recording. Secrets never enter
it: the config is redacted (:func:`redact_config`), and every secret value
found in the config, every URL password and every bearer token is also
scrubbed from the log lines, the audit entries and the states. The file is
written under a temporary name with SQLite's secure_delete and moved into
place, so no freed page keeps an unredacted byte.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ...config_load import ConfigError, load
from .recorder import Recorder, RecordingError, connect

REDACTED = "<redacted>"

_SECRET_WORDS = r"(?:token(?!izer)|secret|passw(?:or)?d|passwd|credential|auth|bearer|api[_-]?key|private[_-]?key|(?<![a-z])key)"
_SECRET_KEY = re.compile(rf"^[\w.-]*{_SECRET_WORDS}[\w.-]*$", re.IGNORECASE)
# "key: value" or "key=value" anywhere in a line (block mappings, flow mappings, --flag=value).
_KEY_VALUE = re.compile(
    rf"""(?P<key>[\w.-]*{_SECRET_WORDS}[\w.-]*)(?P<q>["']?)(?P<sep>\s*[:=]\s*)"""
    r"""(?P<val>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,}\]#]+)""",
    re.IGNORECASE,
)
# A secret-named flag followed by its value in a flow list: ["--api-key", "VALUE"].
_FLAG_THEN_VALUE = re.compile(
    rf"""(?P<flag>["']?--[\w-]*{_SECRET_WORDS}[\w-]*["']?\s*,\s*)(?P<val>"[^"]*"|'[^']*'|[^\s,\]]+)""",
    re.IGNORECASE,
)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/\s:@'\"]*):(?P<pw>[^/\s@'\"]*)@", re.IGNORECASE)
_BEARER = re.compile(r"(?P<word>\bbearer\s+)(?P<val>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE)
_ENV_KEY = re.compile(r"^(?P<indent>\s*)(?:-\s+)?(?P<q>[\"']?)env(?P=q)\s*:\s*(?P<rest>.*)$")
_BLOCK_VALUE = re.compile(r"^(?P<head>\s*(?:-\s+)?[^:#]+?:\s+)(?P<val>[^#\s][^#]*?)(?P<tail>\s*(?:#.*)?)$")
_FLOW_VALUE = re.compile(r"(?P<head>[{,]\s*[^:,{}]+?\s*:\s*)(?P<val>\"[^\"]*\"|'[^']*'|[^,}]+?)(?P<tail>\s*(?=[,}]))")
_MIN_SCRUB_LEN = 4  # shorter "secrets" (an env value of "1") are too common to scrub from free text


@dataclass(frozen=True)
class BundleExtras:
    log_lines: list[str]
    audit_entries: list[dict]
    config_text: str  # already redacted
    created_at: float | None


# --- redaction -----------------------------------------------------------------


def redact_text(text: str) -> str:
    """Mask URL passwords, bearer tokens and secret-named ``key: value`` / ``key=value`` pairs in free text."""
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    text = _BEARER.sub(lambda m: m["word"] + REDACTED, text)
    text = _FLAG_THEN_VALUE.sub(lambda m: m["flag"] + REDACTED, text)
    return _KEY_VALUE.sub(_mask_key_value, text)


def _mask_key_value(m: re.Match) -> str:
    val = m["val"]
    if val in ("null", "~", '""', "''", "true", "false") or val.startswith(("{", "[", "&", "*", "|", ">")):
        return m[0]  # nothing secret here (or a nested block handled by line structure)
    if val.startswith(REDACTED) or val.strip("\"'") == REDACTED:
        return m[0]
    return f"{m['key']}{m['q']}{m['sep']}{REDACTED}"


def redact_config(text: str) -> str:
    """The config with every secret value replaced by ``<redacted>``; comments and layout kept.

    Redacted: values of secret-named keys (token, key, secret, password,
    credential, auth, bearer…) and everything nested under them, every value
    of every ``env:`` mapping, passwords in URLs, bearer tokens, and
    ``--secret-flag VALUE`` pairs. Values the YAML parser finds under those
    names are also replaced wherever else they appear, whatever the layout.
    """
    out = []
    block_indent: int | None = None  # inside an env: block or a nested secret block
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        eol = line[len(body):]
        indent = len(body) - len(body.lstrip())
        if block_indent is not None:
            stripped = body.lstrip()
            # A YAML list may sit at its key's own indent ("env:\n- name: A").
            if stripped and not stripped.startswith("#") and (
                    indent < block_indent or (indent == block_indent and not stripped.startswith("- "))):
                block_indent = None
            elif body.strip() and not body.lstrip().startswith("#"):
                out.append(_mask_block_line(body) + eol)
                continue
        env = _ENV_KEY.match(body)
        if env is not None:
            rest = env["rest"]
            if not rest.strip() or rest.lstrip().startswith("#"):
                block_indent = indent
            elif rest.lstrip().startswith("{"):
                body = body[: env.start("rest")] + _FLOW_VALUE.sub(
                    lambda m: m["head"] + REDACTED + m["tail"], rest)
            out.append(redact_text(body) + eol)
            continue
        m = re.match(rf"^(\s*(?:-\s+)?)[\"']?[\w.-]*{_SECRET_WORDS}[\w.-]*[\"']?\s*:\s*(#.*)?$", body,
                     re.IGNORECASE)
        if m is not None:  # a secret-named key opening a nested block: everything under it is secret
            block_indent = indent
        out.append(redact_text(body) + eol)
    redacted = "".join(out)
    for secret in sorted(config_secrets(text), key=len, reverse=True):
        redacted = redacted.replace(secret, REDACTED)
    return redacted


def _mask_block_line(body: str) -> str:
    m = _BLOCK_VALUE.match(body)
    if m is not None:
        return m["head"] + REDACTED + m["tail"]
    stripped = body.lstrip()
    if stripped.startswith("- "):  # a list item: the whole item is a value
        return body[: len(body) - len(stripped)] + "- " + REDACTED
    return redact_text(body)


def config_secrets(text: str) -> set[str]:
    """Secret strings the YAML of ``text`` holds (empty when it does not parse or breaks the
    reader's limits: the line-by-line redaction still runs)."""
    try:
        data = load(text, "<config>")
    except ConfigError:
        return set()
    found: set[str] = set()
    _collect(data, False, found)
    return {s for s in found if len(s) >= _MIN_SCRUB_LEN and s != REDACTED}


def _collect(node, secret: bool, found: set[str]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            name = str(k)
            _collect(v, secret or name == "env" or bool(_SECRET_KEY.match(name)), found)
    elif isinstance(node, list):
        flag_before = False
        for item in node:
            _collect(item, secret or flag_before, found)
            flag_before = isinstance(item, str) and item.startswith("--") and bool(
                re.search(_SECRET_WORDS, item, re.IGNORECASE)) and "=" not in item
            if isinstance(item, str) and item.startswith("--") and "=" in item:
                flag, _, value = item.partition("=")
                if re.search(_SECRET_WORDS, flag, re.IGNORECASE):
                    found.add(value)
    elif node is not None and not isinstance(node, bool):
        value = str(node)
        if secret:
            found.add(value)
        elif isinstance(node, str):
            for m in _URL_USERINFO.finditer(value):
                found.add(m["pw"])
            for m in _BEARER.finditer(value):
                found.add(m["val"])


def scrub(value, secrets: Iterable[str], *, by_key: bool = False):
    """``value`` (a string, or a JSON-able structure) with secrets and credentials masked.

    ``by_key``: also mask every string under a secret-named key or an ``env`` key (for audit
    entries; not for fleet states, where an engine may well be called "auth").
    """
    secrets = sorted(secrets, key=len, reverse=True)

    def one(s: str) -> str:
        for secret in secrets:
            if secret in s:
                s = s.replace(secret, REDACTED)
        return redact_text(s)

    def walk(node, masked: bool):
        if isinstance(node, str):
            return REDACTED if masked else one(node)
        if isinstance(node, dict):
            return {(one(k) if isinstance(k, str) else k):
                    walk(v, masked or (by_key and (k == "env" or bool(_SECRET_KEY.match(str(k))))))
                    for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(v, masked) for v in node]
        return node

    return walk(value, False)


# --- the file --------------------------------------------------------------------

EXTRAS_SCHEMA = """
CREATE TABLE bundle_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE bundle_log (seq INTEGER PRIMARY KEY, line TEXT NOT NULL);
CREATE TABLE bundle_audit (seq INTEGER PRIMARY KEY, entry TEXT NOT NULL);
"""


def write_bundle(path: str, states: Iterable[tuple[float, dict]], log_lines: list[str],
                 audit_entries: list[dict], config_text: str, *, precision: int | None = 6) -> int:
    """Write one self-contained, replayable incident file; returns the number of states.

    Replaces ``path`` atomically. Raises :class:`RecordingError` (one line) when it cannot be written.
    """
    secrets = config_secrets(config_text)
    tmp = f"{path}.partial-{os.getpid()}"
    for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
        if os.path.exists(leftover):
            os.unlink(leftover)
    n = 0
    try:
        with Recorder(tmp, retention_s=None, precision=precision) as rec:
            rec._db().execute("PRAGMA secure_delete = ON")  # rewritten blocks leave no old bytes behind
            for ts, doc in states:
                rec.append(ts, scrub(doc, secrets))
                n += 1
        conn = connect(tmp)
        try:
            conn.execute("PRAGMA secure_delete = ON")
            conn.executescript(EXTRAS_SCHEMA)
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO bundle_log (line) VALUES (?)", ((scrub(str(l), secrets),) for l in log_lines))
            conn.executemany("INSERT INTO bundle_audit (entry) VALUES (?)",
                             ((json.dumps(scrub(e, secrets, by_key=True), default=str),) for e in audit_entries))
            conn.executemany("INSERT INTO bundle_meta VALUES (?, ?)",
                             (("config", redact_config(config_text)), ("created_at", repr(time.time()))))
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode = DELETE")  # one file: no -wal/-shm beside it
            conn.execute("VACUUM")
        finally:
            conn.close()
        os.replace(tmp, path)
    except (OSError, sqlite3.Error, RecordingError) as e:
        raise RecordingError(f"cannot write incident bundle {path}: {e}") from None
    finally:
        for leftover in (tmp, tmp + "-wal", tmp + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return n


def read_bundle_extras(path: str) -> BundleExtras:
    """The log lines, audit entries and redacted config stored in a bundle."""
    conn = connect(path, readonly=True)
    try:
        meta = dict(conn.execute("SELECT key, value FROM bundle_meta"))
        lines = [r[0] for r in conn.execute("SELECT line FROM bundle_log ORDER BY seq")]
        audit = [json.loads(r[0]) for r in conn.execute("SELECT entry FROM bundle_audit ORDER BY seq")]
    except sqlite3.OperationalError:
        raise RecordingError(f"{path}: a recording, not an incident bundle") from None
    except (sqlite3.Error, ValueError) as e:
        raise RecordingError(f"{path}: damaged incident bundle ({e})") from None
    finally:
        conn.close()
    created = meta.get("created_at")
    return BundleExtras(lines, audit, meta.get("config", ""), float(created) if created else None)
