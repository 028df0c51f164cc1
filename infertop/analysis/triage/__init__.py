"""Live incident triage: verdicts that name a cause, with their evidence and remedies.

Pure: a :class:`Triage` is fed one fleet state per tick with the tick's clock and answers the
verdicts active now. Rules (:mod:`.rules`) say what holds at this tick; the debouncer
(:mod:`.debounce`) turns that into onset after a minimum duration and a clear after a quiet
spell, so a value hovering at a threshold never flaps.
"""

from .changes import changes_before
from .debounce import Debouncer
from .engine import Triage
from .types import Evidence, Finding, Remedy, Verdict

__all__ = ["Debouncer", "Evidence", "Finding", "Remedy", "Triage", "Verdict", "changes_before"]
