"""``isotope serve --workers N``: N server processes on one port, each with its own
listening socket (SO_REUSEPORT), so the kernel spreads connections evenly.

uvicorn's own ``--workers`` shares one listening socket among its processes, and two
things made it no faster than one process here: an idle process accepts every pending
connection in one go (8 keep-alive clients arriving together all landed on one
process), and the shared socket is made with protocol 0, so asyncio never turned off
Nagle's algorithm and each keep-alive request after the first waited ~40 ms for a
delayed ACK (uvicorn#3149: one client got 17 searches/s from two workers against 55
from one). Each process here binds its own TCP socket to the address; Linux admits only
sockets of the same user to a SO_REUSEPORT group.
"""

from __future__ import annotations

import multiprocessing
import signal
import socket
import time
from types import FrameType


def listening_socket(host: str, port: int, *, shared: bool = True) -> socket.socket:
    """A TCP socket bound to ``(host, port)``; with ``shared``, one that other processes
    of this user can also bind (SO_REUSEPORT). OSError when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _worker(host: str, port: int) -> None:
    import uvicorn

    sock = listening_socket(host, port)
    config = uvicorn.Config("isotope.server.app:serving_app", factory=True, log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


def run(host: str, port: int, workers: int) -> None:
    """Serve with ``workers`` processes until SIGINT or SIGTERM; a process that dies is
    started again (at most once a second). The environment (ISOTOPE_SERVE_INDEX, the
    settings) is each process's configuration."""
    if not hasattr(socket, "SO_REUSEPORT"):  # pragma: no cover - Windows
        raise OSError("--workers needs SO_REUSEPORT (Linux, macOS, BSD); use --workers 1")
    # Not shared first: another server on the port (even another `isotope serve
    # --workers`, whose sockets would otherwise admit ours) is an error, not a partner.
    listening_socket(host, port, shared=False).close()
    holder = listening_socket(host, port)  # held until the end, so nothing else takes it
    context = multiprocessing.get_context("spawn")
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    processes = []
    try:
        for _ in range(workers):
            process = context.Process(target=_worker, args=(host, port), daemon=True)
            process.start()
            processes.append(process)
        while not stopping:
            time.sleep(0.2)
            for n, process in enumerate(processes):
                if not process.is_alive() and not stopping:
                    time.sleep(1)
                    processes[n] = context.Process(target=_worker, args=(host, port),
                                                   daemon=True)
                    processes[n].start()
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        holder.close()
        for s, handler in previous.items():
            signal.signal(s, handler)


__all__ = ["listening_socket", "run"]
