"""The one fleet state: every source joined into one immutable, time-stamped
:class:`FleetState` per tick.

The TUI panes, ``infertop snapshot`` (table and JSON) and the flight recorder
all render this same object, so one metric has one value everywhere at a
given moment. Every engine, GPU source and the cluster carry a
:class:`Freshness`: where the values came from, when they were sampled, and
whether they are fresh, stale (since when, why) or missing (why).

:class:`FleetJoiner` builds the states; it keeps what must survive a failed
poll (an engine's last good values and since when it is down). Replay turns
recorded documents back into states with :meth:`FleetState.from_doc`.

The code is split by responsibility; every public name stays importable
from here:

- :mod:`.fleet_types` — the state's types and their documents (to_doc/from_doc);
- :mod:`.fleet_join` — :class:`FleetJoiner` and :func:`missing_reasons`.
"""

from __future__ import annotations

from .fleet_join import QUIET_NVML, STALE_AFTER_POLLS, FleetJoiner, missing_reasons
from .fleet_types import (
    DOC_VERSION,
    FRESH,
    MISSING,
    STALE,
    ClusterState,
    EngineState,
    FleetState,
    FleetView,
    Freshness,
    Slo,
    SourceState,
)

__all__ = [
    "DOC_VERSION",
    "FRESH",
    "MISSING",
    "QUIET_NVML",
    "STALE",
    "STALE_AFTER_POLLS",
    "ClusterState",
    "EngineState",
    "FleetJoiner",
    "FleetState",
    "FleetView",
    "Freshness",
    "Slo",
    "SourceState",
    "missing_reasons",
]
