"""Flight recorder: one JSON-able document per tick, appended to a SQLite file.

The file is SQLite (standard library, WAL) holding *blocks*: the ticks of
about a minute, encoded column-wise and compressed together. Consecutive
fleet states are nearly identical, so a block stores each leaf of the
document (``engines/vllm-0/stats/running``) once as a column over the block's
ticks: a constant column is one value, an integer column is a first value
and deltas, a float column is scaled to integers at a bounded precision and
delta-encoded too. An index on the block start time makes a seek one
B-tree lookup plus one block decode.

The pending (incomplete) block is rewritten in place every ``flush_s``
seconds of tick time (``INSERT OR REPLACE`` on its id), so a killed writer
loses at most that much. Retention drops whole blocks older than
``retention_s`` behind the newest tick, and the oldest blocks beyond
``max_bytes``.

The documents are opaque here: any dict of str/int/float/bool/None/list/dict
round-trips. Floats are rounded to ``precision`` significant digits, but
never coarser than a millisecond (so wall-clock timestamps keep their
milliseconds); ``precision=None`` stores them exactly. See :func:`quantize`.
"""

from __future__ import annotations

import json
import lzma
import math
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

FORMAT = "infertop-recording"
VERSION = 1
CODECS = ("lzma", "zlib")
MIN_DECIMALS = 3  # never round a float coarser than 1e-3 (milliseconds of a timestamp)
_MAX_SCALED = 2**53  # scaled floats must stay exact as integers
_MAX_BLOCK_TICKS = 3600  # a block also ends after this many ticks, whatever their spacing
_MAX_HELD_TICKS = 2 * _MAX_BLOCK_TICKS  # while writes fail, at most this many ticks wait in memory

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (
    id INTEGER PRIMARY KEY,      -- block sequence; the pending block is rewritten under its id
    t0 REAL NOT NULL,            -- first tick's ts
    t1 REAL NOT NULL,            -- last tick's ts
    n INTEGER NOT NULL,          -- ticks in the block
    codec TEXT NOT NULL,
    nbytes INTEGER NOT NULL,     -- len(data), kept for the max_bytes budget
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS blocks_t0 ON blocks (t0);
CREATE INDEX IF NOT EXISTS blocks_t1 ON blocks (t1);
"""


class RecordingError(Exception):
    """The file is not a usable recording (one line, for the operator)."""


# --- float precision ---------------------------------------------------------


def decimals_for(x: float, precision: int) -> int:
    """Decimal places that keep ``precision`` significant digits of ``x``, at least :data:`MIN_DECIMALS`."""
    if x == 0 or not math.isfinite(x):
        return MIN_DECIMALS
    return min(17, max(MIN_DECIMALS, precision - 1 - math.floor(math.log10(abs(x)))))


def quantize(doc, precision: int | None = 6):
    """``doc`` with every float rounded as the recorder stores it (what replay returns)."""
    if precision is None:
        return doc
    if type(doc) is float:
        if not math.isfinite(doc):
            return doc
        scale = 10 ** decimals_for(doc, precision)
        scaled = doc * scale
        if not math.isfinite(scaled):  # 1e308 at MIN_DECIMALS: kept as it is rather than overflowing
            return doc
        return round(scaled) / scale  # int / int is correctly rounded; the decoder computes the same
    if isinstance(doc, dict):
        return {k: quantize(v, precision) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [quantize(v, precision) for v in doc]
    return doc


# --- block codec ---------------------------------------------------------------


_SCALARS = (str, int, float, bool, type(None))


def flatten(doc: dict) -> list[tuple[tuple, object]]:
    """(path, leaf) pairs of ``doc``; raises TypeError for anything JSON cannot hold."""
    if not isinstance(doc, dict):
        raise TypeError(f"a recorded document must be a dict, got {type(doc).__name__}")
    out: list = []
    _flatten(doc, (), out)
    return out


def _flatten(node, prefix: tuple, out: list) -> None:
    # Non-empty containers are walked; scalars and empty containers are leaves.
    if isinstance(node, dict):
        if not node:
            out.append((prefix, {}))
        for k, v in node.items():
            if not isinstance(k, str):
                raise TypeError(f"document keys must be strings, got {k!r} at {'/'.join(map(str, prefix))}")
            _flatten(v, prefix + (k,), out)
    elif isinstance(node, (list, tuple)):
        if not node:
            out.append((prefix, []))
        for i, v in enumerate(node):
            _flatten(v, prefix + (i,), out)
    elif isinstance(node, _SCALARS):
        out.append((prefix, node))
    else:
        raise TypeError(f"cannot record a {type(node).__name__} at {'/'.join(map(str, prefix))}")


def _encode_column(values: list, precision: int | None, ints: bytearray) -> dict:
    """One path's values over a block. Integer runs go to ``ints`` as zigzag varint deltas."""
    first = values[0]
    kind = type(first)
    # count() runs in C; the type test keeps 1, 1.0 and True apart.
    if values.count(first) == len(values) and all(type(v) is kind for v in values):
        return {"k": quantize(first, precision)}
    if all(type(v) is int for v in values):
        _put_deltas(values, ints)
        return {"d": len(values)}
    if precision is not None and all(type(v) is float and math.isfinite(v) for v in values):
        mags = [abs(v) for v in values]
        lo, hi = min(mags), max(mags)
        dec = decimals_for(hi, precision)
        if not math.isfinite(hi * 10.0**max(dec, MIN_DECIMALS)):  # 1e308: too big to scale, kept as values
            return {"v": [quantize(v, precision) for v in values]}
        if lo > 0 and decimals_for(lo, precision) == dec:  # one decade (the usual case): one scale for all
            scale = 10**dec
            scaled = [round(v * scale) for v in values]
        else:
            decs = [decimals_for(v, precision) for v in values]
            dec = max(decs)
            # Each value keeps its own precision, written at the column's scale (integer math: exact).
            scaled = [round(v * 10**d) * 10 ** (dec - d) for v, d in zip(values, decs)]
        if all(abs(s) < _MAX_SCALED for s in scaled):
            _put_deltas(scaled, ints)
            return {"f": dec, "d": len(values)}
    return {"v": [quantize(v, precision) for v in values]}


def _put_deltas(values: list[int], out: bytearray) -> None:
    prev = 0
    for v in values:
        d, prev = v - prev, v
        z = d << 1 if d >= 0 else ((-d) << 1) - 1  # zigzag: small magnitudes, small codes
        while z >= 0x80:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)


def _take_deltas(buf: bytes, pos: int, count: int) -> tuple[list[int], int]:
    out, acc = [], 0
    for _ in range(count):
        z = shift = 0
        while True:
            b = buf[pos]
            pos += 1
            z |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        acc += (z >> 1) if not z & 1 else -((z + 1) >> 1)
        out.append(acc)
    return out, pos


def _decode_column(col: dict, n: int, ints: bytes, pos: int) -> tuple[list, int]:
    if "k" in col:
        k = col["k"]
        if isinstance(k, (list, dict)):
            return [type(k)() for _ in range(n)], pos  # only empty containers are leaves; never share one
        return [k] * n, pos
    if "d" in col:
        out, pos = _take_deltas(ints, pos, col["d"])
        if "f" in col:
            scale = 10 ** col["f"]
            return [s / scale for s in out], pos  # int / int is correctly rounded: exactly round(v, dec)
        return out, pos
    return col["v"], pos


class BlockBuilder:
    """The ticks of one block, kept column-wise as they arrive: each document is walked once,
    however often the block is (re)encoded."""

    def __init__(self) -> None:
        self.ts: list[float] = []
        self._paths: dict[tuple, int] = {}
        self._where: list[list[int]] = []  # per path: tick indices where it is present
        self._values: list[list] = []  # per path: its values at those ticks

    def __len__(self) -> int:
        return len(self.ts)

    def add(self, ts: float, flat: list[tuple[tuple, object]]) -> None:
        """Add one tick, already flattened by :func:`flatten`."""
        i = len(self.ts)
        self.ts.append(ts)
        paths, where, values = self._paths, self._where, self._values
        for path, value in flat:
            pid = paths.get(path)
            if pid is None:
                pid = paths[path] = len(paths)
                where.append([])
                values.append([])
            where[pid].append(i)
            values[pid].append(value)

    def encode(self, precision: int | None = 6, codec: str = "lzma") -> bytes:
        """Compressed block. ``codec="zlib-fast"``: cheaper, larger (for a block that will be rewritten)."""
        n = len(self.ts)
        cols = []
        ints = bytearray()
        for where, values in zip(self._where, self._values):
            col = _encode_column(values, precision, ints)
            if len(where) != n:
                col["i"] = where
            cols.append(col)
        header = json.dumps({"ts": self.ts, "p": list(self._paths), "c": cols},
                            separators=(",", ":"), allow_nan=True).encode()
        # Layout: header length (4 bytes, big-endian), JSON header, varint stream of the integer columns.
        return _compress(len(header).to_bytes(4, "big") + header + bytes(ints), codec, codec == "zlib-fast")


def encode_block(ticks: list[tuple[float, dict]], precision: int | None = 6, codec: str = "lzma") -> bytes:
    """Column-encode and compress a list of (ts, doc)."""
    builder = BlockBuilder()
    for ts, doc in ticks:
        builder.add(ts, flatten(doc))
    return builder.encode(precision, codec)


def _compress(raw: bytes, codec: str, fast: bool = False) -> bytes:
    if codec == "zlib" or fast:
        return zlib.compress(raw, 1 if fast else 6)
    if codec == "lzma":
        return lzma.compress(raw, preset=6)
    raise ValueError(f"unknown codec {codec!r} (expected one of {', '.join(CODECS)})")


# A recording is a file someone may hand over: a block may not unpack past this
# (3 GiB of zeros compress to 500 KB), nor hold more ticks or a larger list index.
MAX_BLOCK_BYTES = 64 * 2**20
MAX_BLOCK_TICKS = 100_000
MAX_LIST_INDEX = 100_000
# The JSON header (times, paths, columns) is parsed whole: ~12x its size in memory (20000 engines: 50 MB of
# header, 617 MB RSS). 24 MiB holds ~9000 engines of 50 leaves each.
MAX_HEADER_BYTES = 24 * 2**20


def _too_large() -> RecordingError:
    return RecordingError(f"corrupt block: unpacks to more than {MAX_BLOCK_BYTES // 2**20} MiB")


def decompress_block(data: bytes, codec: str) -> bytes:
    """The block's bytes, at most :data:`MAX_BLOCK_BYTES` (else :class:`RecordingError`)."""
    if codec in ("lzma", "zlib", "zlib-fast"):
        d = lzma.LZMADecompressor() if codec == "lzma" else zlib.decompressobj()
        raw = d.decompress(data, MAX_BLOCK_BYTES + 1)
        if len(raw) > MAX_BLOCK_BYTES:
            raise _too_large()
        if not d.eof:
            raise RecordingError("corrupt block: compressed data ends early")
        return raw
    raise RecordingError(f"unknown block codec {codec!r} (written by a newer infertop?)")


_HOLE = object()


def _check_bounds(ts: list, paths: list) -> None:
    if len(ts) > MAX_BLOCK_TICKS:
        raise ValueError(f"{len(ts)} ticks in one block (the limit is {MAX_BLOCK_TICKS})")
    for path in paths:
        for key in path:
            if type(key) is int and not 0 <= key <= MAX_LIST_INDEX:
                raise ValueError(f"list index {key} (the limit is {MAX_LIST_INDEX})")


def _over_limits(paths: list, limits: Mapping[str, int]) -> tuple[set[int], dict[str, int]]:
    """Indices of the paths past ``limits`` (``{"engines": 4096}``: items 4096 on of the top-level list
    ``engines`` are left out) and, per list cut, how many items it had."""
    skip: set[int] = set()
    counts: dict[str, int] = {}
    for pid, path in enumerate(paths):
        if len(path) > 1 and type(path[1]) is int and path[0] in limits and path[1] >= limits[path[0]]:
            skip.add(pid)
            counts[path[0]] = max(counts.get(path[0], 0), path[1] + 1)
    return skip, counts


def decode_block(data: bytes, codec: str, limits: Mapping[str, int] | None = None) -> list[tuple[float, dict]]:
    """The (ts, doc) list an :func:`encode_block` call produced. With ``limits``, a top-level list keeps at
    most that many items (never built past them) and each doc says how many there were: ``{"truncated":
    {"engines": 20000}}``."""
    try:
        raw = decompress_block(data, codec)
        hlen = int.from_bytes(raw[:4], "big")
        if hlen > MAX_HEADER_BYTES:
            raise ValueError(f"header of {hlen / 2**20:.1f} MiB (the limit is {MAX_HEADER_BYTES // 2**20} MiB)")
        header = json.loads(raw[4 : 4 + hlen])
        ts, paths, cols = header["ts"], header["p"], header["c"]
        _check_bounds(ts, paths)
        ints, pos = raw[4 + hlen :], 0
        columns = []
        for col in cols:
            where = col.get("i") or range(len(ts))
            values, pos = _decode_column(col, len(where), ints, pos)
            columns.append((where, values))
    except (ValueError, KeyError, TypeError, IndexError, lzma.LZMAError, zlib.error) as e:
        raise RecordingError(f"corrupt block: {e}") from None
    skip, cut = _over_limits(paths, limits) if limits else ((), {})
    docs: list[dict] = [{"truncated": dict(cut)} if cut else {} for _ in ts]
    for pid, (path, (where, values)) in enumerate(zip(paths, columns)):
        if pid in skip:
            continue
        last = len(path) - 1
        for i, value in zip(where, values):
            node = docs[i]
            for depth, key in enumerate(path):
                leaf = depth == last
                if type(key) is int:
                    while len(node) <= key:
                        node.append(_HOLE)  # a list is dense, but its items may arrive out of order
                    if leaf:
                        node[key] = value
                    else:
                        if node[key] is _HOLE:
                            node[key] = [] if type(path[depth + 1]) is int else {}
                        node = node[key]
                elif leaf:
                    node[key] = value
                else:
                    child = node.get(key)
                    if child is None:
                        child = node[key] = [] if type(path[depth + 1]) is int else {}
                    node = child
    return list(zip(ts, docs))


# --- the file ------------------------------------------------------------------------


def _create_private(path: str) -> None:
    """Create ``path`` 0600 when absent: a recording holds names, URLs and logs (sqlite's -wal follows it)."""
    if path == ":memory:" or path.startswith("file:"):
        return
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    except OSError as e:
        raise RecordingError(f"cannot open {path}: {e.strerror}") from None


def _readonly_uri(path: str) -> str:
    """A URI that opens ``path`` without writing beside it. No ``-wal`` (no writer, or one that closed):
    ``immutable=1``, so SQLite creates no -wal/-shm next to a file someone handed over; with a ``-wal`` a
    writer may be appending: ``mode=ro`` uses its -wal/-shm and sees every block it commits."""
    uri = Path(path).absolute().as_uri()  # percent-encoded: a '?' or '#' in a name stays part of it
    return f"{uri}?mode=ro" if os.path.exists(path + "-wal") else f"{uri}?mode=ro&immutable=1"


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """Open ``path`` as a recording (created when writable and absent)."""
    try:
        if readonly:
            conn = sqlite3.connect(_readonly_uri(path), uri=True, check_same_thread=False)
        else:
            _create_private(path)
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 5000")
        if readonly:
            check_format(conn, path)
            return conn
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # deleted blocks give their pages back
            conn.execute("PRAGMA journal_mode = WAL")
            conn.executescript(SCHEMA)
            conn.execute("INSERT INTO meta VALUES ('format', ?), ('version', ?)", (FORMAT, str(VERSION)))
        else:
            check_format(conn, path)  # before touching it: never write into someone else's database
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn
    except sqlite3.OperationalError as e:  # missing directory, no permission, locked
        raise RecordingError(f"cannot open {path}: {e}") from None
    except sqlite3.DatabaseError as e:
        raise RecordingError(f"{path}: not an infertop recording ({e})") from None


def check_format(conn: sqlite3.Connection, path: str) -> None:
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('format', 'version')"))
    except sqlite3.DatabaseError as e:
        raise RecordingError(f"{path}: not an infertop recording ({e})") from None
    if meta.get("format") != FORMAT:
        raise RecordingError(f"{path}: not an infertop recording")
    if int(meta.get("version", "0")) > VERSION:
        raise RecordingError(f"{path}: recording format v{meta['version']} is newer than this infertop (v{VERSION})")


class Recorder:
    """Append (ts, doc) per tick; one writer (thread-safe for a single writer thread plus callers of close)."""

    def __init__(self, path: str, *, retention_s: float | None = 7 * 86400, block_s: float = 60.0,
                 flush_s: float = 10.0, max_bytes: int | None = None, precision: int | None = 6,
                 codec: str = "lzma") -> None:
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r} (expected one of {', '.join(CODECS)})")
        if block_s <= 0 or flush_s <= 0:
            raise ValueError("block_s and flush_s must be > 0")
        self.path = path
        self.retention_s = retention_s
        self.block_s = block_s
        self.flush_s = flush_s
        self.max_bytes = max_bytes
        self.precision = precision
        self.codec = codec
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = connect(path)
        row = self._conn.execute("SELECT max(id), max(t1) FROM blocks").fetchone()
        self._next_id = (row[0] or 0) + 1
        self._last_ts: float | None = row[1]
        self._pending = BlockBuilder()
        self._pending_id: int | None = None
        self._flushed_ts: float | None = None
        self.blocks_written = 0
        self.ticks_written = 0  # ticks of this session in committed blocks (what a crash now would keep)
        self._done_ticks = 0  # … of them in final blocks (no longer pending)
        self.ticks_dropped = 0  # refused while writes failed and the pending block was full

    def append(self, ts: float, doc: dict) -> None:
        """Record one tick. ``ts`` must increase; ``doc`` must be JSON-able."""
        ts = float(ts)
        if not math.isfinite(ts):
            raise ValueError(f"tick time must be finite, got {ts}")
        flat = flatten(doc)  # before any state changes: a bad document is refused whole
        with self._lock:
            if self._conn is None:
                raise RecordingError(f"{self.path}: recorder is closed")
            if self._last_ts is not None and ts <= self._last_ts:
                raise ValueError(f"tick at {ts} is not after the last recorded tick ({self._last_ts})")
            failure = None
            if self._pending and (ts - self._pending.ts[0] >= self.block_s or len(self._pending) >= _MAX_BLOCK_TICKS):
                try:
                    self._write_pending(final=True)
                    self._pending, self._pending_id = BlockBuilder(), None
                    self._enforce_retention(ts)
                except RecordingError as e:  # the block stays pending, this tick joins it: the next tick retries
                    failure = e
            if len(self._pending) >= _MAX_HELD_TICKS:  # writes have failed for long: bound what waits in memory
                self.ticks_dropped += 1
                raise RecordingError(f"{failure or 'cannot write the recording'} "
                                     f"({self.ticks_dropped} ticks dropped: more than {_MAX_HELD_TICKS} waiting)")
            if not self._pending:
                self._pending_id = self._next_id
                self._next_id += 1
            self._pending.add(ts, flat)
            self._last_ts = ts
            if self._flushed_ts is None:
                self._flushed_ts = ts
            elif failure is None and ts - self._flushed_ts >= self.flush_s:
                self._write_pending()
            if failure is not None:
                raise failure

    def flush(self) -> None:
        """Write the pending block now (a crash after this loses nothing appended before it)."""
        with self._lock:
            if self._conn is not None and self._pending:
                self._write_pending()

    def close(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            try:
                if self._pending:
                    self._write_pending(final=True)
            finally:  # a last block that cannot be written is reported; the file is closed anyway
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _db(self) -> sqlite3.Connection:
        """The open connection (the callers hold the lock and have checked it is open)."""
        if self._conn is None:
            raise RecordingError(f"{self.path}: recorder is closed")
        return self._conn

    def _write_pending(self, final: bool = False) -> None:
        # An interim flush is rewritten within the minute: compress it cheaply.
        codec = self.codec if final else "zlib-fast"
        try:
            data = self._pending.encode(self.precision, codec)
        except (ValueError, TypeError, OverflowError, MemoryError) as e:
            raise RecordingError(f"{self.path}: cannot encode a block: {type(e).__name__}: {e}") from None
        try:
            self._db().execute(
                "INSERT OR REPLACE INTO blocks (id, t0, t1, n, codec, nbytes, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (self._pending_id, self._pending.ts[0], self._pending.ts[-1], len(self._pending), codec,
                 len(data), data),
            )
        except sqlite3.Error as e:
            # The pending ticks stay in memory: the next flush tries again.
            raise RecordingError(f"{self.path}: cannot write the recording: {e}") from None
        self._flushed_ts = self._pending.ts[-1]
        self.blocks_written += 1
        self.ticks_written = self._done_ticks + len(self._pending)
        if final:
            self._done_ticks = self.ticks_written

    def _enforce_retention(self, now_ts: float) -> None:
        try:
            self._drop_old_blocks(now_ts)
        except sqlite3.Error as e:  # the block is written; old ones are dropped at the next block
            raise RecordingError(f"{self.path}: cannot drop old blocks: {e}") from None

    def _drop_old_blocks(self, now_ts: float) -> None:
        dropped = 0
        if self.retention_s is not None:
            dropped += self._db().execute("DELETE FROM blocks WHERE t1 < ?", (now_ts - self.retention_s,)).rowcount
        if self.max_bytes is not None:
            total = self._db().execute("SELECT coalesce(sum(nbytes), 0) FROM blocks").fetchone()[0]
            if total > self.max_bytes:
                # Oldest first, keeping at least the newest complete block.
                for bid, nbytes in self._db().execute("SELECT id, nbytes FROM blocks ORDER BY id").fetchall()[:-1]:
                    if total <= self.max_bytes:
                        break
                    self._db().execute("DELETE FROM blocks WHERE id = ?", (bid,))
                    total -= nbytes
                    dropped += 1
        if dropped:
            self._db().execute("PRAGMA incremental_vacuum")


def record_all(path: str, ticks: Iterable[tuple[float, dict]], **kwargs) -> int:
    """Write every (ts, doc) to ``path`` and close it; returns the number of ticks."""
    n = 0
    with Recorder(path, **kwargs) as rec:
        for ts, doc in ticks:
            rec.append(ts, doc)
            n += 1
    return n
