"""SLOs per workload class: per-stage budgets, error budget and burn rate, a capacity what-if (Little's
law, M/M/c) and cost. Pure: no I/O, no clock (every function takes ``now``); never imports textual.

- :mod:`.targets` — a class's targets and objective (from the config, duck-typed);
- :mod:`.assign` — which class holds an engine (patterns, else the class its healthy history fits);
- :mod:`.budget` — each stage's percentile against its budget, and requests within a target from buckets;
- :mod:`.burn` — error budget and multi-window burn rates over the history there is;
- :mod:`.capacity` — concurrency needed, replicas and max_num_seqs that hold the targets, what-ifs;
- :mod:`.cost` — tokens per GPU-hour, cost per million tokens, idle GPU-hours;
- :mod:`.report` — :class:`SloWatch`: all of it per tick, as the document the state carries.
"""
