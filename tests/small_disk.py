"""A real small disk for the disk-full tests: a tmpfs of a few hundred KiB mounted for one test.

Writes beyond its size fail with a real ``ENOSPC`` from the kernel (SQLite reports it as
``SQLITE_FULL``), at whatever phase the writer is in: creating a file, growing a WAL,
checkpointing, appending a record. A *ballast* file takes all but ``leave`` bytes, so a sweep
over ``leave`` moves the failure through every phase; freeing the ballast or growing the disk
(``resize``) is the operator making room.

Mounting needs root (CAP_SYS_ADMIN) -- the test command runs as root in CI; elsewhere the tests
are skipped with that reason.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest


class SmallDisk:
    """``with SmallDisk(tmp_path / "disk", 256 * 1024) as disk:`` -- ``disk.path`` is its root."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = Path(path)
        self.size = size
        self._ballast = self.path / f"ballast-{uuid.uuid4().hex}"

    def __enter__(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs for a real disk-full test (needs root): {done.stderr.strip()}")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=True)

    @property
    def free(self) -> int:
        return shutil.disk_usage(self.path).free

    def fill(self, leave: int = 0) -> None:
        """Take all free space but ``leave`` bytes (page-rounded by tmpfs) with a ballast file."""
        take = max(0, self.free - leave)
        with open(self._ballast, "ab") as f:
            try:
                f.write(b"\0" * take)
            except OSError:  # the last page did not fit: the disk is as full as it gets
                pass

    def empty(self) -> None:
        """Remove the ballast: the operator made room."""
        self._ballast.unlink(missing_ok=True)

    def resize(self, size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)
        self.size = size


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is the kernel's ENOSPC."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == 28:
            return True
        exc = exc.__cause__
    return False


__all__ = ["SmallDisk", "is_disk_full"]
