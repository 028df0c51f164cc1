"""A loopback TCP proxy that holds every chunk the client sends for ``delay_s`` before
passing it on: a slow API server, with the real one (the emulator) behind it."""

from __future__ import annotations

import socket
import threading
import time


class DelayProxy:
    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream, self.delay_s = upstream, delay_s
        self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(64)
        self.port = self._lsock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self.requests = 0  # client chunks passed on (about one per HTTP request)
        self.in_flight = 0  # chunks being held now
        self.peak_in_flight = 0
        self._count = threading.Lock()

    def start(self) -> "DelayProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._lsock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._lsock.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=30)
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, delayed: bool) -> None:
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if delayed:
                    with self._count:
                        self.requests += 1
                        self.in_flight += 1
                        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                    time.sleep(self.delay_s)  # the slowness being emulated, not a wait in a test
                    with self._count:
                        self.in_flight -= 1
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
