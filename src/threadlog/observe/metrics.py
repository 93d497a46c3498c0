"""Metrics: what the store and the runtime measure, kept in-process and, optionally, in OTel.

Theory of operation
-------------------
*Off costs nothing.* The instruments report to ``threadlog._hooks.METRICS``, ``None`` until
`install` puts a `Metrics` there; the commit path then reads one global and tests it. No clock
is read and no lock taken while it is ``None``.

*Where the numbers come from.* Timings are taken where the work is done: an append from its
call to its durability (``threadlog_append_seconds``, the embedded store's ``append`` and
``aappend``), each ``fdatasync`` of a group commit (``threadlog_fsync_seconds``), the records a
commit made durable (``threadlog_commit_records``) and those queued behind it when it ended
(``threadlog_queue_depth``). Sessions open and leases held are counted by the runtime as it
opens and closes threads. Everything about *what happened* is counted from the durable records
(`on_records`, a store listener the runtime adds): records by type, recoveries
(``thread.resumed``) and their repairs by kind, tool calls by outcome.

*Two ways out.* `Metrics.prometheus_text` renders the Prometheus text exposition format
(``GET /metrics`` of ``threadlog serve``), hand-written: a few counters, gauges and fixed-bucket
histograms need no library. With ``meter=`` (an OpenTelemetry ``Meter``) every value is also
recorded on OTel instruments of the same names, for an OTel metrics pipeline.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal

from threadlog import _hooks
from threadlog._dataclass import dataclass

if TYPE_CHECKING:
    from threadlog.model.envelope import Record
    from threadlog.store.protocol import Store

__all__ = ["INSTRUMENTS", "Instrument", "Metrics", "install", "uninstall"]

_LATENCY = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
_COUNTS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)


@dataclass(frozen=True, slots=True)
class Instrument:
    """One metric: its kind, help text, unit and (histograms) bucket bounds."""

    kind: Literal["histogram", "counter", "gauge"]
    help: str
    unit: str = ""
    buckets: tuple[float, ...] = ()


INSTRUMENTS: dict[str, Instrument] = {
    "threadlog_append_seconds": Instrument(
        "histogram", "Time from an append to its durability.", "s", _LATENCY
    ),
    "threadlog_fsync_seconds": Instrument(
        "histogram", "Time of one fdatasync of a group commit.", "s", _LATENCY
    ),
    "threadlog_commit_records": Instrument(
        "histogram", "Records made durable by one group commit.", "{record}", _COUNTS
    ),
    "threadlog_queue_depth": Instrument(
        "gauge", "Records queued for the next group commit when the last one ended.", "{record}"
    ),
    "threadlog_open_threads": Instrument("gauge", "Threads open as live sessions.", "{thread}"),
    "threadlog_leases_held": Instrument(
        "gauge", "Single-writer leases this process's runtimes hold.", "{lease}"
    ),
    "threadlog_records_total": Instrument("counter", "Durable records, by type.", "{record}"),
    "threadlog_recoveries_total": Instrument(
        "counter", "Recoveries (thread.resumed records).", "{recovery}"
    ),
    "threadlog_repairs_total": Instrument(
        "counter", "Repairs made by recoveries, by kind.", "{repair}"
    ),
    "threadlog_tool_calls_total": Instrument(
        "counter", "Tool calls that reached an outcome, by outcome.", "{call}"
    ),
}
"""Every metric threadlog records, by its (Prometheus) name."""

_OUTCOMES = {
    "tool_call.denied": "denied",
    "tool_call.cancelled": "cancelled",
    "tool_call.unknown": "unknown",
}


@dataclass(slots=True)
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1


def _labels(labels: tuple[tuple[str, str], ...], extra: str = "") -> str:
    parts = [f'{k}="{_escape(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Metrics:
    """The metrics of this process (see the module docstring).

    Args:
        meter: an OpenTelemetry ``Meter``: every value is recorded on it too.
    """

    def __init__(self, meter: Any = None) -> None:
        self._lock = threading.Lock()
        self._histograms: dict[str, _Histogram] = {}
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._meter = meter
        self._otel: dict[str, Any] = {}
        self._stores: dict[int, int] = {}

    def attach(self, store: Store) -> None:
        """Count ``store``'s durable records (`on_records`); a store shared by several
        runtimes is listened to once."""
        with self._lock:
            n = self._stores.get(id(store), 0)
            self._stores[id(store)] = n + 1
        if n == 0:
            store.add_listener(self.on_records)

    def detach(self, store: Store) -> None:
        """Stop counting once every runtime that attached ``store`` has detached."""
        with self._lock:
            n = self._stores.get(id(store), 0) - 1
            if n > 0:
                self._stores[id(store)] = n
                return
            self._stores.pop(id(store), None)
        if n == 0:
            with contextlib.suppress(ValueError):
                store.remove_listener(self.on_records)

    # -- the sink (`threadlog._hooks.MetricsSink`) -----------------------------------------

    def observe(self, name: str, value: float) -> None:
        """Record one value of the histogram ``name``."""
        with self._lock:
            hist = self._histograms.get(name)
            if hist is None:
                hist = self._histograms[name] = _Histogram(INSTRUMENTS[name].buckets)
            hist.observe(value)
        if self._meter is not None:
            self._instrument(name).record(value)

    def add(self, name: str, amount: float = 1, **labels: str) -> None:
        """Add ``amount`` to the counter (or gauge) ``name`` with ``labels``."""
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount
        if self._meter is not None:
            self._instrument(name).add(amount, labels or None)

    def set(self, name: str, value: float) -> None:
        """Set the gauge ``name``."""
        with self._lock:
            self._values[(name, ())] = value
        if self._meter is not None:
            self._instrument(name).set(value)

    def on_records(self, thread_id: str, records: list[Record]) -> None:
        """A store listener: count records by type, recoveries, repairs, tool outcomes."""
        for record in records:
            self.add("threadlog_records_total", type=record.type)
            data = record.data if isinstance(record.data, dict) else {}
            if record.type == "thread.resumed":
                self.add("threadlog_recoveries_total")
                for repair in data.get("repairs") or []:
                    kind = repair.get("kind") if isinstance(repair, dict) else None
                    self.add("threadlog_repairs_total", kind=str(kind or "repair"))
            elif record.type == "tool_call.finished":
                outcome = "ok" if data.get("ok") else "error"
                self.add("threadlog_tool_calls_total", outcome=outcome)
            elif record.type in _OUTCOMES:
                self.add("threadlog_tool_calls_total", outcome=_OUTCOMES[record.type])

    # -- reading ---------------------------------------------------------------------------

    def value(self, name: str, **labels: str) -> float:
        """A counter's or gauge's value (0 if never set)."""
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0)

    def count(self, name: str) -> int:
        """How many values the histogram ``name`` recorded."""
        with self._lock:
            hist = self._histograms.get(name)
            return hist.n if hist is not None else 0

    def prometheus_text(self) -> str:
        """Every metric in the Prometheus text exposition format (version 0.0.4)."""
        lines: list[str] = []
        with self._lock:
            for name, spec in INSTRUMENTS.items():
                lines.append(f"# HELP {name} {spec.help}")
                lines.append(f"# TYPE {name} {spec.kind}")
                if spec.kind == "histogram":
                    hist = self._histograms.get(name) or _Histogram(spec.buckets)
                    counts = hist.counts or [0] * (len(spec.buckets) + 1)
                    running = 0
                    for bound, n in zip((*spec.buckets, float("inf")), counts, strict=True):
                        running += n
                        le = "+Inf" if bound == float("inf") else _number(bound)
                        lines.append(f'{name}_bucket{{le="{le}"}} {running}')
                    lines.append(f"{name}_sum {_number(hist.total)}")
                    lines.append(f"{name}_count {hist.n}")
                    continue
                found = sorted((k[1], v) for k, v in self._values.items() if k[0] == name)
                if not found and spec.kind == "gauge":
                    found = [((), 0.0)]
                for labels, value in found:
                    lines.append(f"{name}{_labels(labels)} {_number(value)}")
        return "\n".join(lines) + "\n"

    def _instrument(self, name: str) -> Any:
        made = self._otel.get(name)
        if made is None:
            spec = INSTRUMENTS[name]
            meter = self._meter
            if spec.kind == "histogram":
                made = meter.create_histogram(name, unit=spec.unit, description=spec.help)
            elif spec.kind == "counter":
                made = meter.create_counter(name, unit=spec.unit, description=spec.help)
            elif name in ("threadlog_open_threads", "threadlog_leases_held"):
                made = meter.create_up_down_counter(name, unit=spec.unit, description=spec.help)
            else:
                made = meter.create_gauge(name, unit=spec.unit, description=spec.help)
            self._otel[name] = made
        return made


def install(metrics: Metrics | None = None) -> Metrics:
    """Turn metrics on for this process: ``metrics`` (default: a new `Metrics`) becomes the
    sink every instrument reports to. Runtimes created from now on count their records."""
    installed = metrics or Metrics()
    _hooks.METRICS = installed
    return installed


def uninstall() -> None:
    """Turn metrics off (the instruments report nowhere again)."""
    _hooks.METRICS = None
