"""Gateway and endpoint-picker queues: the metric names and their extraction (:mod:`.names`), the
collectors that poll the sources (:mod:`.collector`) or read the same series through Prometheus
(:mod:`.prom`), and the sources a config names (:mod:`.config`)."""
