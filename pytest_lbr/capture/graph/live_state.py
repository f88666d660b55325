"""A live graph capture between polls (pure: the capture reads, this decides).

`GraphCapture.poll()` reads what the function tracer's trace_pipe and the fexit
hooks delivered and adds it to a `LiveState`: each context's (a thread, or the
interrupts on it) records not yet cut into hits handed over. `settle` then hands
over the hits that are complete and drops the records they used, so each hit
comes once (see `GraphCapture.poll` for when a hit of each kind is complete).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from pytest_lbr.capture.graph.hits import HitBuilder, hit_event
from pytest_lbr.capture.graph.text import EventRecord, FunctionRecord
from pytest_lbr.capture.hooks.records import RawHit
from pytest_lbr.capture.kinds import kind_of
from pytest_lbr.model import Hit

__all__ = [
    "LIVE_BUFFER_KB",
    "LIVE_FINAL_S",
    "LIVE_HOLD_NS",
    "LIVE_MAX_PENDING",
    "LIVE_QUIET_S",
    "LIVE_READ_LIMIT",
    "Context",
    "LiveState",
    "settle",
]

#: Live captures (`GraphCapture.live()`): a thread quiet this long (seconds) has
#: left its last hit of a glob, or of a program whose returns fexit cannot see.
LIVE_QUIET_S = 1.0
#: How far back (trace clock, ns) a live tracepoint or uprobe hit's calls reach.
LIVE_HOLD_NS = 2_000_000_000
#: Records one context may hold for unfinished hits; beyond, they are handed over
#: as they stand (a hit whose return event was lost must not hold a thread forever).
LIVE_MAX_PENDING = 200_000
#: trace_pipe text read per poll at most (the rest waits for the next poll): a
#: poll stays short, so a deadline or Ctrl-C is seen soon.
LIVE_READ_LIMIT = 1 << 20
#: Per-CPU ring buffer of a live capture, KiB: how far the reader may fall behind.
#: Every function of every task ("system") can come faster than the reader parses
#: records: where it cannot keep up, a buffer the session's size (16 MiB) would
#: hold minutes of records, and it would print hits that late.
LIVE_BUFFER_KB = 2048
#: How long `stop()` of a live capture reads what is left before counting the
#: rest as lost (a stop must come soon after Ctrl-C, not after the backlog).
LIVE_FINAL_S = 2.0

#: A context of a live capture: (thread id, in interrupt context).
Context = tuple[int, bool]


class LiveState:
    """A live capture between polls: each context's records not yet cut into the
    hits handed over, its fexit records, and when records last came."""

    def __init__(self) -> None:
        self.partial = ""  # text after the last whole line read
        self.own: set[int] = set()  # this process's threads (never recorded)
        self.records: dict[Context, list[FunctionRecord | EventRecord]] = {}
        self.exits: dict[Context, dict[int, list[RawHit]]] = {}
        self.arrived: dict[Context, float] = {}  # monotonic time records last came
        self.settled: dict[Context, float] = {}  # when its hits were last looked at
        self.dirty: set[Context] = set()  # new records since then
        self.cut_short = 0
        self.unread = 0  # records left in the buffer at stop

    def add(self, records: Iterable[FunctionRecord | EventRecord], now: float) -> None:
        """Add records that arrived at `now` to their contexts (a thread, or the
        interrupts on it)."""
        table, touched = self.records, set()
        for r in records:
            context = (r.tid, type(r) is FunctionRecord and r.in_irq)
            kept = table.get(context)
            if kept is None:
                kept = table[context] = []
            kept.append(r)
            touched.add(context)
        for context in touched:
            self.arrived[context] = now
        self.dirty |= touched

    def add_exit(self, context: Context, target: int, raw: RawHit, now: float) -> None:
        self.exits.setdefault(context, {}).setdefault(target, []).append(raw)
        self.records.setdefault(context, [])
        self.arrived[context] = now
        self.dirty.add(context)

    def consume(self, context: Context, cut: int, now: float) -> None:
        """Drop the context's records before index `cut` and the fexit records up to
        the last of them (all of them, and the context, when nothing is left)."""
        records = self.records[context]
        self.dirty.discard(context)
        self.settled[context] = now
        if cut >= len(records):
            for table in (self.records, self.exits, self.arrived, self.settled):
                table.pop(context, None)
            return
        if cut:
            upto = records[cut - 1].ts_ns
            exits = self.exits.get(context, {})
            for i, raws in exits.items():
                exits[i] = [x for x in raws if x.ts_ns > upto]
            self.records[context] = records[cut:]


def _hit_key(hit: Hit) -> tuple[object, ...]:
    """What tells a hit from the same hit cut short (the nesting of its calls may
    differ with the records that follow, their number not)."""
    return (hit.target, hit.tid, hit.in_interrupt, hit.timestamp_ns, hit.retval, len(hit.branches))


def settle(live: LiveState, builder: HitBuilder, final: bool, now: float, now_ns: int) -> list[Hit]:
    """The complete hits of the contexts that changed (or went quiet); with
    `final`, every hit. Drops the records they used. `now`: monotonic seconds,
    `now_ns`: the trace clock."""
    out: list[Hit] = []
    for context in list(live.records):
        quiet = now - live.arrived[context] >= LIVE_QUIET_S
        due = quiet and now - live.settled.get(context, 0.0) >= LIVE_QUIET_S
        if not (final or context in live.dirty or due):
            continue
        records, exits = live.records[context], live.exits.get(context, {})
        if final or len(records) > LIVE_MAX_PENDING:
            hits, cut = builder.build(records, exits), len(records)
            live.cut_short += not final
        else:
            hits, cut = _complete_hits(builder, records, exits, quiet, now_ns)
        out.extend(hits)
        live.consume(context, cut, now)
    out.sort(key=lambda h: h.timestamp_ns)
    return out


def _returned_hits(
    builder: HitBuilder, records: list[FunctionRecord | EventRecord]
) -> tuple[list[Hit], int] | None:
    """The quick way for kernel functions with a return event (the usual live
    target): the hits of the records up to the last return event, with that cut,
    when every one of them has returned and nesting them never looked past the
    cut (`Mentions.looked_past_end`), so no record after it can change them. One
    build, where the general way builds twice. None: take the general way."""
    targets = builder.targets
    if not all(
        kind_of(t).ends_at_return_event and i in builder.events for i, t in enumerate(targets)
    ):
        return None
    returns, cut = builder.returns, len(records)
    while cut:
        last = records[cut - 1]
        if isinstance(last, EventRecord) and last.name in returns:
            break
        cut -= 1
    if not cut:
        return None
    open_ended: list[bool] = []
    hits = builder.build(records[:cut], {}, open_ended)
    if open_ended or any(h.retval is None for h in hits):
        return None
    return hits, cut


def _complete_hits(
    builder: HitBuilder,
    records: list[FunctionRecord | EventRecord],
    exits: dict[int, list[RawHit]],
    quiet: bool,
    now_ns: int,
) -> tuple[list[Hit], int]:
    """One context's complete hits that its records up to a cut make alone, and
    the cut: the index of the first record a hit not handed over may use (or a
    tracepoint's next hit, as its calls)."""
    returned = _returned_hits(builder, records)
    if returned is not None:
        return returned
    targets = builder.targets
    hits = builder.build(records, exits)
    times = [r.ts_ns for r in records]
    index = {t.spec: i for i, t in reversed(list(enumerate(targets)))}
    last = {h.target: h for h in hits}  # each target's last hit
    cut = len(records)
    events: dict[int, list[int]] = {}  # an event target -> its events' indexes
    for i, t in enumerate(targets):
        if kind_of(t).by_events:
            at = [k for k, r in enumerate(records) if hit_event(t, builder.events[i], r)]
            events[i] = at
            # Its next hit's calls: since its last event, LIVE_HOLD_NS back at most.
            hold = bisect.bisect_left(times, now_ns - LIVE_HOLD_NS)
            cut = min(cut, max(at[-1] + 1 if at else 0, hold))
    start: list[int] = []  # per hit: the first record it may use
    done: list[bool] = []  # per hit: complete
    for h in hits:
        i = index[h.target]
        if i in events:
            at = events[i]
            k = bisect.bisect_left([times[e] for e in at], h.timestamp_ns)
            start.append(at[k - 1] + 1 if k else 0)
            done.append(True)
            continue
        start.append(bisect.bisect_left(times, h.timestamp_ns))
        if kind_of(targets[i]).ends_at_return_event and i in builder.events:
            # At its return event; or, with that lost, once the thread has called
            # the function again after it (the events come in one pipe, in order).
            done.append(h.retval is not None or last[h.target] is not h)
        elif i in builder.exit_targets:
            # At its fexit record, read from another ring: it may come after a
            # later run's function records.
            done.append(h.retval is not None)
        else:
            done.append(quiet or last[h.target] is not h)  # the thread moved on
    cut = min([cut, *(s for s, d in zip(start, done, strict=True) if not d)])
    while cut < len(records):
        # Complete, and made by the records before the cut alone (not cut short
        # there: the records after it are kept, and must not make it again).
        upto = times[cut - 1] if cut else -1
        alone = {
            _hit_key(h)
            for h in builder.build(
                records[:cut],
                {i: [x for x in xs if x.ts_ns <= upto] for i, xs in exits.items()},
            )
        }
        given = [
            d and s < cut and _hit_key(h) in alone
            for h, s, d in zip(hits, start, done, strict=True)
        ]
        kept = [s for s, g in zip(start, given, strict=True) if not g and s < cut]
        if not kept:
            return [h for h, g in zip(hits, given, strict=True) if g], cut
        cut = min(kept)
    return hits, cut
