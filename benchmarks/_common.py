"""Helpers shared by the benchmark scripts: machine description, statistics, markdown tables."""

from __future__ import annotations

import os
import platform
import statistics
import sys
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as `python benchmarks/x.py` without an installed checkout
    sys.path.insert(0, str(REPO_ROOT))


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(extra: dict[str, str] | None = None) -> list[str]:
    """Lines describing the machine and the library versions, printed before every table."""
    info = {
        "cpu": cpu_model(),
        "cores": f"{os.cpu_count()} logical"
        + (f", {len(os.sched_getaffinity(0))} usable" if hasattr(os, "sched_getaffinity") else ""),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "cbor2": _version("cbor2"),
        "paho-mqtt": _version("paho-mqtt"),
    }
    info.update(extra or {})
    return [f"- {key}: {value}" for key, value in info.items()]


def description(doc: str | None) -> str:
    """A script's ``--help`` description: the first paragraph of its module docstring, its lines
    joined, so that it ends where the author ended the sentence rather than at a line break."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def print_machine(title: str, command: str, extra: dict[str, str] | None = None) -> None:
    print(f"## {title}\n")
    print(f"command: `{command}`\n")
    print("\n".join(machine_info(extra)))
    print()


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): with few samples p99 is the maximum, honestly."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", "").replace("+", ""))
        return True
    except ValueError:
        return cell in ("", "-")


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub markdown table; columns whose cells are all numbers are right-aligned."""
    widths = [max(3, len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    right = [all(_is_number(r[i]) for r in rows) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)) + " |"

    sep = "| " + " | ".join("-" * (w - 1) + ":" if r else "-" * w for w, r in zip(widths, right)) + " |"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def mean_sd(values) -> str:
    """``mean ± sd`` (sample sd, ddof 1) of a list of numbers, 4 decimals; one value as is."""
    import numpy as np

    values = [float(v) for v in values]
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}"


def trained_mean_std(values, digits: int = 2) -> str:
    """``mean ± std`` (population std, as the regression tables print) of the runs that trained,
    NaN marking a refused run, with how many were refused if any."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    ok = v[np.isfinite(v)]
    text = f"{ok.mean():.{digits}f} ± {ok.std():.{digits}f}" if ok.size else "-"
    return text if ok.size == v.size else f"{text} (refused {v.size - ok.size} of {v.size})"


def direct_job(clients, *, job_id: str = "direct"):
    """A ``FederatedJob`` whose requests reach the clients' real handlers in-process, with no codec,
    broker or round engine in between: the same server and client code as ``aggregator.simulate``
    minus the wire (encoding and chunking the private protocols' multi-megabyte histogram vectors
    is most of a simulation's time). Benchmarks use it only where they check, on one
    configuration, that it gives the simulation's model bit for bit.

    Serves the job opening and FedSCS-XGB's client half (sketches, atoms, histograms): what
    FedSCS-XGB's paper protocol and PAX ask. ``config.fit(direct_job(clients))`` trains.
    """
    from aggregator.jobs import FederatedJob
    from edge_client.participant import Participant
    from shared.protocol.envelope import Message
    from shared.protocol.messages import DataSummaryRequest
    from shared.protocol.messages.fedscs_xgb import XgbAtomRequest, XgbHistogramRequest, XgbSketchRequest
    from shared.protocol.topics import AGGREGATOR_ID
    from shared.transport.memory import MemoryBroker, MemoryTransport

    broker = MemoryBroker()
    routes = {}
    for client in clients:
        participant = Participant(MemoryTransport(broker, client.client_id), client)  # never started
        half = participant.halves["fedscs_xgb"]
        routes[client.client_id] = {
            DataSummaryRequest: participant.on_data_summary,
            XgbSketchRequest: half.on_sketch,
            XgbAtomRequest: half.on_atoms,
            XgbHistogramRequest: half.on_histograms,
        }

    class DirectJob(FederatedJob):
        def ask(self, request, clients, expect, *, fold=None):
            self.rounds += 1
            replies = {}
            for client in sorted(clients):
                body = request[client] if isinstance(request, dict) else request
                message = Message.create(body, sender=AGGREGATOR_ID, job=self.job_id, round=self.rounds)
                reply = routes[client][type(body)](message)
                if isinstance(reply, expect):
                    replies[client] = reply if fold is None else fold(client, reply)
            return replies

    return DirectJob(None, sorted(routes), job_id=job_id)


def without_noise(run, *modules):
    """``run()`` with the gateways' differential-privacy noise shares zeroed: every module in
    ``modules`` (and ``edge_client.fleet_sums``) draws ``skellam_share`` from a zero function for
    the call, restored afterwards -- what a private protocol's structure costs without its noise."""
    import numpy as np

    import edge_client.fleet_sums as client_sums

    def zero(shape, mu, shares, rng=None):
        return np.zeros(shape, dtype=np.int64)

    targets = (client_sums, *modules)
    saved = [m.skellam_share for m in targets]
    for m in targets:
        m.skellam_share = zero
    try:
        return run()
    finally:
        for m, share in zip(targets, saved):
            m.skellam_share = share
