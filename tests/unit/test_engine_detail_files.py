"""An engine detail's restart history and log tail are read in a thread worker, never on a paint: the
engines' controller without a Pilot, a small host standing in for the console."""

from __future__ import annotations

import threading

from infertop.config import Config
from infertop.ui.controllers import engines as engines_ctl
from infertop.ui.controllers.engines import EngineController


class Host:
    """The console's services, recorded; a thread worker runs in a thread of its own when asked."""

    def __init__(self) -> None:
        self.workers: list = []
        self.painted = 0
        self.later: list = []

    def run_worker(self, work, *, group="default", exclusive=False, exit_on_error=True, thread=False):
        assert thread, "file reads belong in a thread worker"
        self.workers.append(work)

    def call_from_thread(self, callback, *args):
        self.later.append((callback, args))  # run on "the UI thread" (the test's) once the worker is done

    def render_snapshot(self, force: bool = False) -> None:
        self.painted += 1


class Manager:
    """The two reads the detail needs, recording the thread each ran on."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.log = ["INFO ready"]

    def history(self, name, n):
        self.threads.append(threading.get_ident())
        return [{"event": "start", "engine": name}]

    def tail_log(self, name, n):
        self.threads.append(threading.get_ident())
        return list(self.log)


def run_workers(host: Host) -> None:
    for work in host.workers:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    host.workers.clear()
    for callback, args in host.later:
        callback(*args)
    host.later.clear()


def test_a_detail_paint_reads_no_file_and_shows_what_its_worker_read():
    host, mgr = Host(), Manager()
    clock = [100.0]
    ctl = EngineController(host, type("S", (), {"config": Config(), "read_only": False})(), None, local={},
                           board=None, selected=lambda: None, snapshot=lambda: None, unfinished=list,
                           report_unfinished=lambda e: None, replay=False, clock=lambda: clock[0])
    ctl.manager = mgr

    assert ctl.detail_files("a") == ([], [])  # the first paint: nothing read yet, one read started
    assert mgr.threads == [] and len(host.workers) == 1
    assert ctl.detail_files("a") == ([], []) and len(host.workers) == 1  # no second read while one runs
    run_workers(host)
    main = threading.get_ident()
    assert len(mgr.threads) == 2 and main not in mgr.threads
    assert host.painted == 1  # what was read is painted at once, not at the next tick
    assert ctl.detail_files("a") == ([{"event": "start", "engine": "a"}], ["INFO ready"])
    assert host.workers == []  # fresh: no read

    clock[0] += engines_ctl.DETAIL_FILES_EVERY_S
    mgr.log.append("INFO request done")
    assert ctl.detail_files("a")[1] == ["INFO ready"]  # the last read, while the next runs
    run_workers(host)
    assert ctl.detail_files("a")[1] == ["INFO ready", "INFO request done"] and host.painted == 2
