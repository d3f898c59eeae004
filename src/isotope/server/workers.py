"""``isotope serve --workers N``: N server processes behind one listening socket, the
connections dealt out in turn by the parent process, so each worker holds its share.

Two ways of sharing a port were measured and dropped. uvicorn's own ``--workers`` shares
one listening socket: an idle process accepts every pending connection in one go (8
keep-alive clients arriving together all landed on one process), and its socket is made
with protocol 0, so asyncio never turned off Nagle's algorithm and each keep-alive
request after the first waited ~40 ms for a delayed ACK (uvicorn#3149). One SO_REUSEPORT
socket per worker fixed both, but the kernel spreads connections by a hash of their
addresses: 8 clients split 7:1 or 1:7 in 2 of 5 runs, and p99 rose to 214-283 ms.

Here the parent accepts each connection and passes it (``SCM_RIGHTS`` over a Unix
socket pair) to the next worker in turn; the worker serves it with uvicorn's own
protocol on its event loop (asyncio turns Nagle off on such a socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import selectors
import signal
import socket
import time
from types import FrameType
from typing import Any

HEADER_TIMEOUT = 10.0
"""Seconds a connection may take to send a request's headers (a client that opens
connections and sends half a header, held forever, exhausted the server's files)."""
CONNECTIONS = 1_000
"""Connections a server process holds at once; more are answered 503 at once."""


def protocol_class() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, with a deadline for each request's headers: from a
    connection's start, and from the first byte of each later request, the headers must
    arrive within :data:`HEADER_TIMEOUT` (the body has the gate's ``body_timeout``)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            waiting = self.cycle is None or self.cycle.response_complete
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()  # the headers are in: the request is being served
            elif waiting and self._deadline is None:
                self._arm()  # part of a new request's headers

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(HEADER_TIMEOUT, self._late)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _late(self) -> None:
            self._deadline = None
            if (self.cycle is None or self.cycle.response_complete) \
                    and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline


def more_files() -> None:
    """Raise the soft limit of open files to the hard one (at most 65,536): each
    connection is a file, and the default 1,024 ran out under a flood of idle ones."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = 65_536 if hard == resource.RLIM_INFINITY else min(hard, 65_536)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not Unix, or refused
        pass


def server_config(app: Any, **options: Any) -> Any:
    """uvicorn's configuration for isotope's server: the header deadline, a cap on
    connections, quiet logs."""
    import uvicorn

    return uvicorn.Config(app, http=protocol_class(), limit_concurrency=CONNECTIONS,
                          log_level="warning", **options)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``(host, port)``; OSError when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _worker(channel: socket.socket, log_level: int = logging.WARNING) -> None:
    """A worker: the app of :func:`isotope.server.app.serving_app`, serving the
    connections the parent sends over ``channel``, logging as the parent does (a spawned
    process starts with no logging set up: its errors would go nowhere)."""
    import uvicorn

    from isotope.cli.console import VisibleFormatter

    logging.basicConfig(level=log_level)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(VisibleFormatter("%(levelname)s %(name)s: %(message)s"))

    class Handed(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await self.lifespan.startup()
            if self.lifespan.should_exit:
                raise SystemExit(3)
            config, loop = self.config, asyncio.get_running_loop()

            def protocol() -> asyncio.Protocol:
                made: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                    config=config, server_state=self.server_state,
                    app_state=self.lifespan.state)
                return made

            def received() -> None:
                try:
                    message, fds, _, _ = socket.recv_fds(channel, 1, 64)
                except BlockingIOError:
                    return
                except OSError:
                    message, fds = b"", []
                if not message:  # end of file: the parent is gone
                    loop.remove_reader(channel.fileno())
                    self.should_exit = True
                    return
                # (a message without its descriptor: this process had no file left to
                # receive it in; that connection is lost, the worker goes on)
                for fd in fds:
                    conn = socket.socket(fileno=fd)
                    conn.setblocking(False)
                    loop.create_task(_serve(loop, protocol, conn))

            channel.setblocking(False)
            loop.add_reader(channel.fileno(), received)
            self.servers = []
            self.started = True

    more_files()
    Handed(server_config("isotope.server.app:serving_app", factory=True)).run()


async def _serve(loop: asyncio.AbstractEventLoop, protocol: Any, conn: socket.socket) -> None:
    try:
        await loop.connect_accepted_socket(protocol, sock=conn)
    except OSError:
        conn.close()


def run(host: str, port: int, workers: int, *,
        listener: socket.socket | None = None) -> None:
    """Serve with ``workers`` processes until SIGINT or SIGTERM; a worker that dies is
    started again (at most once a second). The environment (ISOTOPE_SERVE_INDEX, the
    settings) is each process's configuration. ``listener``: a socket already bound to
    ``host:port`` (else one is made; OSError when the address is taken)."""
    if not hasattr(socket, "send_fds"):  # pragma: no cover - Windows
        raise OSError("--workers needs Unix sockets that pass descriptors; use --workers 1")
    more_files()
    listener = listener or listening_socket(host, port)
    context = multiprocessing.get_context("spawn")
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    def start() -> tuple[Any, socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        process = context.Process(target=_worker, daemon=True, args=(
            theirs, logging.getLogger().getEffectiveLevel()))
        process.start()
        theirs.close()
        return process, ours

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    pool: list[tuple[Any, socket.socket]] = []
    turn = 0
    try:
        pool = [start() for _ in range(workers)]
        listener.setblocking(False)
        with selectors.DefaultSelector() as ready:
            ready.register(listener, selectors.EVENT_READ)
            while not stopping:
                for n, (process, channel) in enumerate(pool):
                    if not process.is_alive() and not stopping:
                        channel.close()
                        time.sleep(1)
                        pool[n] = start()
                if not ready.select(timeout=0.2):
                    continue
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    while True:
                        conn, _ = listener.accept()
                        turn = _hand(pool, turn, conn)
    finally:
        listener.close()
        for process, channel in pool:
            channel.close()
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        for process, _ in pool:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _hand(pool: list[tuple[Any, socket.socket]], turn: int, conn: socket.socket) -> int:
    """Pass ``conn`` to the next worker that takes it; returns the next turn."""
    try:
        for tries in range(len(pool)):
            _, channel = pool[(turn + tries) % len(pool)]
            try:
                socket.send_fds(channel, [b"c"], [conn.fileno()])
            except OSError:
                continue  # that worker is gone: the next one takes it
            return (turn + tries + 1) % len(pool)
        return turn
    finally:
        conn.close()


__all__ = ["listening_socket", "run"]
