"""Long metric series as min/max/last buckets: kept up to date on write, read at any zoom.

Every metric point also updates one bucket at each width in ``WIDTHS`` (steps per bucket). A view
of the steps ``lo..hi`` reads the narrowest width that gives at most ``max_points`` buckets, or
the raw points when the range is that short. A series of 200,000 steps is drawn from about 800
buckets of 256 steps; zooming in re-reads narrower buckets of the zoomed range. Nothing is
randomly sampled, so a spike of a single step survives at every zoom level as a bucket's max.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Max, Min

from controlplane.common.errors import InvalidInput
from controlplane.runs.models import MetricBucket, MetricPoint, Run

WIDTHS = (16, 256, 4096, 65536)
MAX_POINTS = 1000
MAX_KEYS = 500
MAX_STEP = 2**31 - 1


def width_for(lo: int, hi: int, max_points: int = MAX_POINTS) -> int:
    """Steps per bucket for a view of the steps ``lo..hi``: 1 means raw points.

    >>> width_for(0, 999), width_for(0, 1000), width_for(0, 199_999), width_for(0, 10**9)
    (1, 16, 256, 65536)
    """
    span = hi - lo + 1
    if span <= max_points:
        return 1
    for width in WIDTHS:
        if span / width <= max_points:
            return width
    return WIDTHS[-1]


def _fold(rows: Iterable[tuple[int, str, int, float, datetime]], widths: Sequence[int] = WIDTHS) -> dict[tuple, list]:
    """(run, key, step, value, time) rows -> {(run, key, width, bucket): [min, max, last, last_step, last_time]}."""
    out: dict[tuple, list] = {}
    for run_id, key, step, value, time in rows:
        for width in widths:
            k = (run_id, key, width, step // width)
            b = out.get(k)
            if b is None:
                out[k] = [value, value, value, step, time]
                continue
            b[0], b[1] = min(b[0], value), max(b[1], value)
            if step >= b[3]:
                b[2], b[3], b[4] = value, step, time
    return out


def _upsert_sql(n: int) -> str:
    table = MetricBucket._meta.db_table
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * n)
    return (
        f"INSERT INTO {table} (run_id, key, width, bucket, vmin, vmax, vlast, last_step, last_time) VALUES {values} "
        f"ON CONFLICT (run_id, key, width, bucket) DO UPDATE SET "
        f"vmin = {least}({table}.vmin, excluded.vmin), vmax = {greatest}({table}.vmax, excluded.vmax), "
        f"vlast = CASE WHEN excluded.last_step >= {table}.last_step THEN excluded.vlast ELSE {table}.vlast END, "
        f"last_time = CASE WHEN excluded.last_step >= {table}.last_step THEN excluded.last_time ELSE {table}.last_time END, "
        f"last_step = {greatest}({table}.last_step, excluded.last_step)"
    )


def rollup(points: Sequence[MetricPoint], chunk: int = 500) -> int:
    """Fold metric points into their buckets; idempotent (writing a point twice changes nothing).

    Returns the number of buckets written. Call it in the transaction that inserts the points.
    """
    return _write(_fold((p.run_id, p.key, p.step, p.value, p.time) for p in points), chunk)


def _write(folded: dict[tuple, list], chunk: int = 500) -> int:
    items = sorted(folded.items())  # a fixed order: concurrent writers lock buckets in the same order
    with transaction.atomic(), connection.cursor() as cursor:
        for start in range(0, len(items), chunk):
            part = items[start:start + chunk]
            params = [v for (run_id, key, width, bucket), (lo, hi, last, step, time) in part
                      for v in (run_id, key, width, bucket, lo, hi, last, step, time)]
            cursor.execute(_upsert_sql(len(part)), params)
    return len(items)


def rebuild(run: Run, batch: int = 50_000) -> int:
    """Recompute a run's buckets from its points (for rows written before buckets existed)."""
    MetricBucket.objects.filter(run=run).delete()
    written, cursor = 0, 0
    while True:
        points = list(MetricPoint.objects.filter(run=run, id__gt=cursor).order_by("id")[:batch])
        if not points:
            return written
        written += rollup(points)
        cursor = points[-1].id


def rewind(run: Run, to_step: int) -> None:
    """Forget the steps after ``to_step`` in the buckets (the points themselves are deleted by the
    caller): buckets wholly after it go, the one that straddles it is refolded from what is left."""
    for width in WIDTHS:
        MetricBucket.objects.filter(run=run, width=width, bucket__gt=to_step // width).delete()
        start = (to_step // width) * width
        straddling = MetricBucket.objects.filter(run=run, width=width, bucket=to_step // width, last_step__gt=to_step)
        if not straddling.exists():
            continue
        straddling.delete()
        rows = (MetricPoint.objects.filter(run=run, step__gte=start, step__lte=to_step).order_by("id")
                .values_list("run_id", "key", "step", "value", "time"))
        _write(_fold(rows.iterator(chunk_size=10_000), widths=(width,)))


def _epoch_ms(column: str) -> str:
    """SQL for a timestamp column as integer milliseconds since the epoch."""
    if connection.vendor == "postgresql":
        return f"CAST(EXTRACT(EPOCH FROM {column}) * 1000 AS BIGINT)"
    return f"CAST(ROUND((julianday({column}) - 2440587.5) * 86400000) AS INTEGER)"  # SQLite


def _check_range(lo: int | None, hi: int | None) -> None:
    for name, v in (("lo", lo), ("hi", hi)):
        if v is not None and not 0 <= v <= MAX_STEP:
            raise InvalidInput.one(name, f"must be between 0 and {MAX_STEP}")
    if lo is not None and hi is not None and hi < lo:
        raise InvalidInput.one("hi", "must be at least lo")


def series(*, run: Run, keys: Sequence[str], lo: int | None = None, hi: int | None = None,
           max_points: int = MAX_POINTS) -> dict:
    """The keys' values over the steps ``lo..hi`` (the whole run when omitted), bucketed.

    Returns ``{"width", "lo", "hi", "cursor", "series": {key: {"step", "time", "min", "max",
    "last"}}}`` with ``time`` in milliseconds since the epoch (of a bucket's last point). ``cursor`` is the live log's position when the read began: a client that then
    follows the websocket from it sees every later point exactly once.
    """
    keys = list(dict.fromkeys(k for k in keys if k))
    if not keys:
        raise InvalidInput.one("key", "name at least one metric key")
    if len(keys) > MAX_KEYS:
        raise InvalidInput.one("key", f"at most {MAX_KEYS} keys per request")
    if not 10 <= max_points <= 5000:
        raise InvalidInput.one("max_points", "must be between 10 and 5000")
    _check_range(lo, hi)
    cursor = series_cursor(run=run)
    if lo is None or hi is None:
        # The extent of the series, from the widest buckets (a handful of rows per key).
        extent = MetricBucket.objects.filter(run=run, key__in=keys, width=WIDTHS[-1]).aggregate(
            lo=Min("bucket"), hi=Max("last_step"))
        if extent["hi"] is None:  # no buckets: points written without roll-up, or none at all
            extent = MetricPoint.objects.filter(run=run, key__in=keys).aggregate(lo=Min("step"), hi=Max("step"))
            extent["lo"] = extent["lo"] or 0
        else:
            extent["lo"] = extent["lo"] * WIDTHS[-1]
        lo = extent["lo"] if lo is None else lo
        hi = (extent["hi"] if extent["hi"] is not None else lo) if hi is None else hi
        hi = max(hi, lo)
    width = width_for(lo, hi, max_points)
    out = {k: {"step": [], "time": [], "min": [], "max": [], "last": []} for k in keys}
    marks = ", ".join(["%s"] * len(keys))
    if width == 1:
        table = MetricPoint._meta.db_table
        sql = (f"SELECT key, step, {_epoch_ms('time')}, value, value, value FROM {table} "
               f"WHERE run_id = %s AND key IN ({marks}) AND step >= %s AND step <= %s AND id <= %s ORDER BY key, step")
        params = [run.pk, *keys, lo, hi, cursor]
    else:
        table = MetricBucket._meta.db_table
        sql = (f"SELECT key, last_step, {_epoch_ms('last_time')}, vmin, vmax, vlast FROM {table} "
               f"WHERE run_id = %s AND key IN ({marks}) AND width = %s AND bucket >= %s AND bucket <= %s ORDER BY key, bucket")
        params = [run.pk, *keys, width, lo // width, hi // width]
    # Plain tuples with the time already in milliseconds: a long view is tens of thousands of rows,
    # and building a datetime per row costs more than the query.
    with connection.cursor() as db:
        db.execute(sql, params)
        rows = db.fetchall()
    for key, step, time_ms, vmin, vmax, vlast in rows:
        s = out[key]
        s["step"].append(step)
        s["time"].append(int(time_ms))
        s["min"].append(vmin)
        s["max"].append(vmax)
        s["last"].append(vlast)
    return {"width": width, "lo": lo, "hi": hi, "cursor": cursor, "series": out}


def series_cursor(*, run: Run) -> int:
    """The id of the run's newest metric point: the live log's position now."""
    return MetricPoint.objects.filter(run=run).aggregate(c=Max("id"))["c"] or 0


def run_keys(*, run: Run) -> list[str]:
    """Every metric key the run has written, sorted (from the widest buckets: one row per key)."""
    keys = set(MetricBucket.objects.filter(run=run, width=WIDTHS[-1]).values_list("key", flat=True).distinct())
    if not keys:
        keys = set(MetricPoint.objects.filter(run=run).values_list("key", flat=True).distinct())
    return sorted(keys)
