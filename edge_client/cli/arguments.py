"""Argument parsing that fails in one line, shows defaults, and checks values up front.

The ``type=`` validators below run while argparse reads the command line, so a bad value
(``--rounds -1``, a missing ``--trust`` file, ``-o out.txt``, a client id with a ``/``) stops
the command before it opens a port, a broker connection or a file.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence, TypeVar

from edge_client.cli.errors import USAGE


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps hand-wrapped descriptions and appends ``(default: X)`` to every option that has one.

    Options whose default is None/False (flags, "computed when absent") show none; help texts
    that already explain their default are left alone.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if default in (None, False, [], argparse.SUPPRESS) or "default" in text.lower() or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


class Parser(argparse.ArgumentParser):
    """``error`` prints one line -- ``wheelfed train: argument --rounds: ...`` -- and exits 2."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(USAGE)


_Parsed = TypeVar("_Parsed")


def _typed(name: str, check: Callable[[str], _Parsed]) -> Callable[[str], _Parsed]:
    """argparse shows a type's ``__name__`` when it raises ValueError; name the expectation."""
    check.__name__ = name
    return check


def int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return _typed(f"integer >= {low}", parse)


def float_in(
    low: float, high: float = float("inf"), *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], float]:
    """A finite float in [low, high] (open ends where asked); NaN and inf are refused."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        too_low = value <= low if low_open else value < low
        too_high = value >= high if high_open else value > high
        if value != value or value in (float("inf"), float("-inf")) or too_low or too_high:
            left, right = "(" if low_open else "[", ")" if high_open else "]"
            upper = "inf)" if high == float("inf") else f"{high:g}{right}"
            raise argparse.ArgumentTypeError(f"must be in {left}{low:g}, {upper}, got {text}")
        return value

    return _typed("number", parse)


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)
positive_float = float_in(0.0, low_open=True)
non_negative_float = float_in(0.0)
fraction = float_in(0.0, 1.0, low_open=True)  # a share of gateways: (0, 1]
holdout_share = float_in(0.0, 1.0, high_open=True)  # a share held out of training: [0, 1)


def _port(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int_at_least(low)(text)
        if value > 65535:
            raise argparse.ArgumentTypeError(f"must be a TCP port {low}-65535, got {value}")
        return value

    return _typed("port", parse)


port_number = _port(1)
listen_port = _port(0)  # 0: any free port


def existing_file(text: str) -> Path:
    """A file that exists and can be read (a directory or a missing path is one clear line)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text} (permission denied)")
    return path


existing_file.__name__ = "file"


def existing_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"no such directory: {text}" if not path.exists() else f"{text} is not a directory"
        )
    return path


existing_dir.__name__ = "directory"


def output_file(*suffixes: str, what: str = "output") -> Callable[[str], object]:
    """A file to write: its folder exists and is writable, its name ends in one of ``suffixes``.

    No suffixes means any name. Nothing is created here; the command writes it when it has
    something to write.
    """

    def parse(text: str) -> Path:
        path = Path(text)
        if suffixes and path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{what} must end in {' or '.join(suffixes)}, got {text}")
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a directory; give a file name")
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise argparse.ArgumentTypeError(f"the folder {folder} does not exist (create it first)")
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise argparse.ArgumentTypeError(f"cannot write {text} (permission denied)")
        return path

    return _typed(what, parse)


#: Model ids end up in ``MODEL_ID:vN`` references, bundle names and gateway status lines.
MODEL_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def model_id(text: str) -> str:
    if not MODEL_ID_PATTERN.match(text) or ":v" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a usable model id: use 1-64 letters, digits, _ . - (it becomes MODEL_ID:vN)"
        )
    return text


model_id.__name__ = "model id"


def serial_port(text: str) -> str:
    """A device or pty path that exists now, or a pyserial URL (``loop://``, ``socket://h:p``)."""
    if "://" in text:
        return text
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(
            f"no such serial device: {text} (is the sensor adapter plugged in? "
            "ls /dev/serial/by-id/ lists the connected ones)"
        )
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a serial device")
    return text


serial_port.__name__ = "serial port"


def recording_file(text: str) -> Path:
    """A WheelFed recording: exists, and its header reads (a CSV or random bytes are refused here)."""
    from firmware_bridge.recording import RecordingError, RecordingReader

    path = existing_file(text)
    try:
        RecordingReader(path).close()
    except RecordingError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (recordings come from wheelfed record or wheelfed import)") from None
    return path


recording_file.__name__ = "recording"


def gateway_id(text: str) -> str:
    from shared.protocol.envelope import validate_client_id
    from shared.protocol.topics import AGGREGATOR_ID

    if text == AGGREGATOR_ID:
        raise argparse.ArgumentTypeError(f"{AGGREGATOR_ID!r} is the aggregator's id, not a gateway's")
    try:
        return validate_client_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


gateway_id.__name__ = "gateway id"


def gateway_ids(text: str) -> list[str]:
    """``gw-1,gw-2`` as a list of valid ids (empty items are an error, not skipped)."""
    ids = [item.strip() for item in text.split(",")]
    if not all(ids):
        raise argparse.ArgumentTypeError(f"expected comma-separated gateway ids, got {text!r}")
    return [gateway_id(item) for item in ids]


gateway_ids.__name__ = "gateway ids"


def add_subcommand(
    sub: argparse._SubParsersAction,
    name: str,
    help: str,
    *,
    examples: Sequence[str] = (),
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand whose ``--help`` ends with runnable examples (the CLI contract tests run them)."""
    epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples) if examples else None
    return sub.add_parser(name, help=help, description=description or help[:1].upper() + help[1:] + ".", epilog=epilog)
