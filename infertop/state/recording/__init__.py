"""Recording fleet states: the flight recorder's file (:mod:`.recorder`), the states kept while running
(:mod:`.state_log`) with their spill to disk (:mod:`.spill`), the incident bundle (:mod:`.bundle`) and
playback (:mod:`.replay`)."""
