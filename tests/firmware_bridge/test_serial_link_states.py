"""SerialReader on real ptys: a pty that ends (its number is then someone else's), a stable name
that comes back leading to another device (a re-enumerated adapter), a path that is missing, a
port held by another reader."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from firmware_bridge.frames import SampleFrame, encode_frame
from firmware_bridge.replay import open_pty
from firmware_bridge.serial_link import ReceivedFrame, SerialReader
from tests.firmware_bridge.bridge_support import WAIT_S, wait_for


def frame(seq: int) -> bytes:
    return encode_frame(SampleFrame(1, seq, seq * 10_000, np.full((10, 3), seq, np.int16)))


def reopen_pty_number(path: str, tries: int = 50) -> int | None:
    """A new pty that gets ``path`` again, as the next process to open a pty would; None if taken."""
    spare: list[int] = []
    try:
        for _ in range(tries):
            master, got = open_pty()
            if got == path:
                return master
            spare.append(master)
        return None
    finally:
        for fd in spare:
            os.close(fd)


def test_a_pty_whose_other_end_closed_has_ended_and_its_number_is_left_to_others() -> None:
    master, path = open_pty()
    got: list[ReceivedFrame] = []
    reader = SerialReader(path, 115200, on_received=got.append, backoff_initial_s=0.02, backoff_max_s=0.05)
    with reader:
        assert reader.wait_connected(WAIT_S) and reader.state == "up"
        os.write(master, frame(0))
        assert wait_for(lambda: len(got) == 1)
        os.close(master)  # the replay ends: the pty number is freed once the reader lets go
        assert wait_for(lambda: reader.state == "ended" and not os.path.exists(path))
        second = reopen_pty_number(path)
        if second is None:
            pytest.skip(f"another process took {path} meanwhile")
        try:  # the next process to open a pty got the number: its reader, not ours, may lock it
            other = SerialReader(path, 115200, lambda f: None)
            with other:
                assert other.wait_connected(WAIT_S) and other.state == "up"
            s = reader.stats
        finally:
            os.close(second)
    assert (s.state, s.opens, len(got)) == ("ended", 1, 1)


def test_a_stable_name_leading_to_a_new_device_is_changed(tmp_path: Path) -> None:
    link = tmp_path / "ttyChair"
    master, slave = open_pty()
    os.symlink(slave, link)
    reader = SerialReader(str(link), 115200, lambda f: None, backoff_initial_s=0.02, backoff_max_s=0.05)
    with reader:
        assert reader.wait_connected(WAIT_S)
        os.unlink(link)
        os.close(master)
        assert wait_for(lambda: reader.state == "gone")
        master2, slave2 = open_pty()
        os.symlink(slave2, link)
        try:
            assert wait_for(lambda: reader.connected and reader.state == "changed"), reader.stats
        finally:
            os.close(master2)
        assert reader.stats.device_changes == 1


def test_a_missing_path_is_gone_until_it_appears(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    link = tmp_path / "ttyLater"
    reader = SerialReader(str(link), 115200, lambda f: None, backoff_initial_s=0.02, backoff_max_s=0.05)
    master = None
    try:
        with reader:
            assert reader.wait_first_attempt(WAIT_S) == "gone"
            assert wait_for(lambda: reader.stats.open_failures >= 3)
            master, slave = open_pty()
            os.symlink(slave, link)
            assert reader.wait_connected(WAIT_S) and reader.state == "up"  # the first device seen
    finally:
        if master is not None:
            os.close(master)
    gone = [r for r in caplog.records if "serial device gone" in r.getMessage()]
    assert len(gone) == 1 and gone[0].levelname == "WARNING"  # one line, not one per retry


def test_a_port_held_by_another_reader_is_busy() -> None:
    master, path = open_pty()
    try:
        with SerialReader(path, 115200, lambda f: None) as first:
            assert first.wait_connected(WAIT_S)
            second = SerialReader(path, 115200, lambda f: None).start()
            try:
                assert second.wait_first_attempt(WAIT_S) == "busy" and not second.connected
            finally:
                second.stop()
    finally:
        os.close(master)
