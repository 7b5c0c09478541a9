"""A throw-away PostgreSQL server: initdb in a temporary directory, started on a free loopback
port and stopped (the directory removed) at the end.

The server binaries are the system's when `initdb` and `pg_ctl` are on PATH (or in Debian's
/usr/lib/postgresql/<version>/bin), otherwise the `pgserver` wheel's. PostgreSQL refuses to
run as root: as root the server runs as the `postgres` user when there is one, else `nobody`."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def find_binaries() -> Path:
    """The directory holding initdb, pg_ctl and postgres."""
    for name in ("initdb", "pg_ctl"):
        found = shutil.which(name)
        if found and shutil.which("postgres"):
            return Path(found).resolve().parent
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    if debian:
        return debian[0].parent
    try:
        from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError:
        raise RuntimeError(
            "no PostgreSQL server binaries: install them, or `pip install pgserver`"
            " (bench/peers/requirements.txt)"
        ) from None
    return Path(POSTGRES_BIN_PATH)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    def __init__(self, *, port: int | None = None) -> None:
        self.bin = find_binaries()
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="bench-peers-pg-"))
        self.data = self.root / "data"
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres" if _user_exists("postgres") else "nobody"
        self.pid: int | None = None

    def _run(self, *args: str) -> None:
        subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            check=True,
            capture_output=True,
            user=self.user,
            cwd=self.root,
        )

    def start(self) -> Postgres:
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chmod(self.root, 0o755)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root}"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-o", options, "start")
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        return self

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self) -> None:
        try:
            if self.pid is not None:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            self.pid = None
            time.sleep(0.2)
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Postgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
