"""Reading through Prometheus: one bounded query path (:mod:`.connect`), the fleet of engines
(:mod:`.fleet`, its PromQL in :mod:`.fleet_query`, the answers mapped to engines in :mod:`.fleet_map`),
GPUs from dcgm-exporter series (:mod:`.gpu`) and the SLO budget's bucket counts (:mod:`.slo`)."""
