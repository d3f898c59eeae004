"""A Chroma server on this machine (``chroma run`` from the chromadb wheel, the ``chroma``
extra), for trying a server on one machine, and for the tests and benchmarks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from isotope.errors import StoreError


@contextlib.contextmanager
def local_server(folder: Path, port: int | None = None, *, wait: float = 60.0
                 ) -> Iterator[str]:
    """A Chroma server (``chroma run`` from the chromadb wheel) on ``folder``, on loopback
    (``port``, else a free one), until the block ends: its ``chroma+http://`` URL. For
    trying a server on one machine, and for the tests and benchmarks."""
    import shutil
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    if port is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
    command = shutil.which("chroma", path=str(Path(sys.executable).parent)) or "chroma"
    server = subprocess.Popen([command, "run", "--path", str(folder), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise StoreError(f"`{command} run` did not start on port {port} "
                                     f"(install it with: pip install 'isotopedb[chroma]')"
                                     ) from None
                time.sleep(0.2)
        yield f"chroma+http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
