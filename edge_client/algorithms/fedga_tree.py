"""FedGA-Tree's client half (paper Alg. 1, client steps): depth by cross-validation, a noisy
count, the local CART structure, one fitness vector per generation, the final personal tree.

The client's split and folds (the r / 1-r split, the K folds) come from the job's seed and a
hash of this gateway's id, so a request answered twice (redelivery, restart) gets the same
answer. The Laplace noise of the window count does not: it is drawn from the operating system's
entropy, which the server cannot regenerate, and released once per window set (``CountReleases``),
so repeated jobs on the same windows get the same noisy count and the server cannot average
fresh draws.

What leaves the gateway before ``finish``: a depth, a noisy count, a structure without
thresholds, two booleans (regression), and per generation one fitness per candidate. The
trees themselves -- thresholds and leaf values fitted to this person's windows -- stay here
until ``finish`` sends the single chosen tree as this gateway's model.
"""

from __future__ import annotations

import hashlib
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from shared.model.inference import as_float32_values
from shared.protocol.envelope import Message
from shared.protocol.messages.fedga_tree import (
    GADepthReply,
    GADepthRequest,
    GAFinishReply,
    GAFinishRequest,
    GAGenerationReply,
    GAGenerationRequest,
    GAStructureReply,
    GAStructureRequest,
    GATask,
)
from shared.tree_encoding import check_strings

from ..dispatcher import Dispatcher, RequestRejected
from ..secure_aggregation import SecureAggregationClient
from ..training_data import JobSnapshots, LabelledData, class_ids
from .fedga_cart import Grown, Samples, cv_scores, f1_macro, grow, mse, predict, r2, route, to_ensemble, to_strings

__all__ = ["CVResult", "CountReleases", "FedGATreeClient", "LocalGA"]

MAX_JOBS = 4


@dataclass(frozen=True)
class CVResult:
    """``scores[k, j]``: the validation score (F1, or R² for regression) of fold ``k`` at depth
    ``depths[j]``; ``depth``: the depth with the best mean score (the shallowest on ties)."""

    depths: np.ndarray
    scores: np.ndarray

    @property
    def depth(self) -> int:
        return int(self.depths[int(np.argmax(self.scores.mean(axis=0)))])


def coefficient_of_variation(values: np.ndarray, axis: int) -> np.ndarray:
    """The standard deviation (population) over the absolute mean along ``axis``: a
    dimensionless spread, comparable across data sets (the paper's phi and theta); 0 for
    constant values, infinite where the mean is 0 and the values vary."""
    mean = np.abs(values.mean(axis=axis))
    std = values.std(axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(std == 0, 0.0, std / mean)


class CountReleases:
    """The ε-differentially private window counts this gateway has released, one per window set.

    The Laplace noise is drawn from ``rng`` (the operating system's entropy unless a test seeds
    it) the first time a window set's count is asked for, and that noisy count is returned for
    the same windows and ε ever after, in any job: a server that knows every job's seed cannot
    regenerate the draw, and asking again returns no fresh draw to average. The releases live in
    the gateway's memory; a restarted gateway draws afresh.

    Parameters
    ----------
    rng : numpy.random.Generator, optional
        The noise source; a fresh ``default_rng()`` (OS entropy) by default.
    """

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self.rng = np.random.default_rng() if rng is None else rng
        self._released: dict[bytes, float] = {}

    @staticmethod
    def window_set(X: np.ndarray, target: np.ndarray) -> bytes:
        """SHA-256 of the windows' features and labels: the key of their release."""
        digest = hashlib.sha256()
        for array in (X, target):
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(array.tobytes())
        return digest.digest()

    def count(self, X: np.ndarray, target: np.ndarray, epsilon: float | None) -> float:
        """The window count of ``(X, target)`` plus Laplace(1/``epsilon``) noise, drawn once per
        window set and ``epsilon``; the exact count when ``epsilon`` is None.

        Parameters
        ----------
        X : numpy.ndarray
            The windows' features, one row each.
        target : numpy.ndarray
            Their labels (class ids or regression targets).
        epsilon : float or None
            The privacy parameter of the release; None releases the exact count.

        Returns
        -------
        float
            The released count.
        """
        n = X.shape[0]
        if epsilon is None:
            return float(n)
        key = self.window_set(X, target) + np.float64(epsilon).tobytes()
        if key not in self._released:
            self._released[key] = float(n + self.rng.laplace(0.0, 1 / epsilon))
        return self._released[key]


class LocalGA:
    """One job's view of this client's data: the split, the folds, the noisy count, and the
    fitting and scoring of structures (the split and folds deterministic in the task's seed and
    ``client_id``; the count released by ``releases``, a fresh ``CountReleases`` if None)."""

    def __init__(self, task: GATask, data: LabelledData, client_id: str, releases: CountReleases | None = None) -> None:
        self.task = task
        self.regression = task.task == "regression"
        self.n_classes = len(task.classes)
        self.feature_names = data.feature_names or tuple(f"f{j}" for j in range(data.X.shape[1]))
        X = as_float32_values(data.X)  # the split rule: features compared as float32
        if self.regression:
            target = np.asarray(data.y, dtype=np.float64)
            if not np.isfinite(target).all():
                raise RequestRejected("bad_data", "regression targets must be finite")
        else:
            target = class_ids(data.y, task.classes)
            X, target = X[target >= 0], target[target >= 0]
        n = X.shape[0]
        if n < max(task.cv_folds, 2):
            raise RequestRejected(
                "too_few_samples",
                f"needs at least {max(task.cv_folds, 2)} labelled windows for {task.cv_folds}-fold cross-validation",
            )
        self.X, self.target, self.n = X, target, n
        self.seed = [task.seed, zlib.crc32(client_id.encode())]
        n_train = n if task.train_ratio >= 1 else min(max(int(round(task.train_ratio * n)), 1), n - 1)
        order = np.random.default_rng([*self.seed, 0]).permutation(n)
        self.train_rows = np.sort(order[:n_train])
        self.validation_rows = np.sort(order[n_train:]) if n_train < n else self.train_rows
        self.noisy_count = (releases or CountReleases()).count(X, target, task.epsilon)
        self._structures: dict[int, np.ndarray] = {}

    def samples(self, rows: np.ndarray) -> Samples:
        return Samples.of(self.X[rows], self.target[rows], regression=self.regression, n_classes=self.n_classes)

    @cached_property
    def _split(self) -> tuple[Samples, Samples]:
        return self.samples(self.train_rows), self.samples(self.validation_rows)

    @cached_property
    def _all(self) -> Samples:
        return self.samples(np.arange(self.n))

    def fit_and_score_data(self, full_data: bool) -> tuple[Samples, Samples]:
        """(fitting data, scoring data): the r / 1-r split, or all data twice (``full_data``)."""
        return (self._all, self._all) if full_data else self._split

    def score(self, truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """F1 (macro) per row of class ids, or R² per row of values."""
        return r2(truth, predicted) if self.regression else f1_macro(truth, predicted, self.n_classes)

    @cached_property
    def cv(self) -> CVResult:
        """K-fold cross-validation of CART over ``[d_min, d_max]`` (``fedga_cart.cv_scores``)."""
        depths = np.arange(self.task.d_min, self.task.d_max + 1)
        folds = np.array_split(np.random.default_rng([*self.seed, 2]).permutation(self.n), self.task.cv_folds)
        scores = cv_scores(self.X, self.target, folds, depths, regression=self.regression, n_classes=self.n_classes)
        return CVResult(depths, scores)

    def votes(self, depth: int) -> tuple[bool, bool]:
        """Regression votes: all data for fitness (Eq. 1: little noise across folds at the
        job's depth, phi_d < phi*, and scores that vary with depth, theta > theta*), and elitism
        (Eq. 2: more than mu* percent distinct target values)."""
        if not self.regression:
            return False, False
        cv = self.cv
        column = int(np.clip(depth, cv.depths[0], cv.depths[-1]) - cv.depths[0])
        phi = float(coefficient_of_variation(cv.scores[:, column], axis=0))
        theta = float(coefficient_of_variation(cv.scores, axis=1).mean())
        mu = 100.0 * np.unique(self.target).size / self.n
        return bool(phi < self.task.phi_star and theta > self.task.theta_star), bool(mu > self.task.mu_star)

    def structure(self, depth: int) -> np.ndarray:
        """This client's CART structure at ``depth``, fitted on its fitting part (thresholds and
        values dropped)."""
        if depth not in self._structures:
            self._structures[depth] = to_strings(grow(self._split[0], depth), depth)[0]
        return self._structures[depth]

    def fitness(self, population: np.ndarray, depth: int, full_data: bool) -> tuple[np.ndarray, Grown]:
        """Fit every structure by CART on the fitting data; F1 or MSE on the scoring data.
        Returns the fitness vector and the grown trees."""
        fit, held = self.fit_and_score_data(full_data)
        grown = grow(fit, depth, population)
        predicted = predict(grown, route(grown, held.X), regression=self.regression)
        truth = held.terms[:, 0] if self.regression else np.argmax(held.terms, axis=1)
        value = mse(truth, predicted) if self.regression else f1_macro(truth, predicted, self.n_classes)
        return value, grown


class FedGATreeClient:
    """Answers ``fedga_tree.*`` requests from the job's snapshot."""

    capability = "fedga_tree"

    def __init__(self, data: JobSnapshots, secure: SecureAggregationClient) -> None:
        self.data = data
        self.client_id = secure.client_id
        self._jobs: OrderedDict[str, LocalGA] = OrderedDict()
        #: The noisy window counts released so far (OS entropy; ``Participant.seed_noise`` for tests).
        self.releases = CountReleases()

    @property
    def noise_rng(self) -> np.random.Generator:
        """The source of the count noise (``Participant.seed_noise`` replaces it)."""
        return self.releases.rng

    @noise_rng.setter
    def noise_rng(self, rng: np.random.Generator) -> None:
        self.releases = CountReleases(rng)

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(GADepthRequest, self.on_depth)
        dispatcher.register(GAStructureRequest, self.on_structure)
        dispatcher.register(GAGenerationRequest, self.on_generation)
        dispatcher.register(GAFinishRequest, self.on_finish)

    def _job(self, message: Message, task: GATask) -> LocalGA:
        job = message.envelope.job
        state = self._jobs.get(job)
        if state is None or state.task != task:
            data = self.data.get(job, task.feature_set_version)
            state = LocalGA(task, data, self.client_id, self.releases)
            self._jobs[job] = state
            while len(self._jobs) > MAX_JOBS:
                self._jobs.popitem(last=False)
        self._jobs.move_to_end(job)
        return state

    def _population(self, state: LocalGA, population: np.ndarray, depth: int) -> np.ndarray:
        try:
            return check_strings(population, depth, state.X.shape[1], name="population")
        except ValueError as exc:
            raise RequestRejected("bad_request", str(exc)) from None

    def on_depth(self, message: Message) -> GADepthReply:
        body: GADepthRequest = message.body
        state = self._job(message, body.task)
        return GADepthReply(depth=state.cv.depth, noisy_count=state.noisy_count)

    def on_structure(self, message: Message) -> GAStructureReply:
        body: GAStructureRequest = message.body
        state = self._job(message, body.task)
        full, elitism = state.votes(body.depth)
        return GAStructureReply(
            structure=state.structure(body.depth),
            noisy_count=state.noisy_count,
            vote_full_data=full,
            vote_elitism=elitism,
        )

    def on_generation(self, message: Message) -> GAGenerationReply:
        body: GAGenerationRequest = message.body
        state = self._job(message, body.task)
        population = self._population(state, body.population, body.depth)
        if not body.join:
            return GAGenerationReply(fitness=state.fitness(population, body.depth, body.full_data)[0])
        own = state.structure(body.depth)
        fitness = state.fitness(np.vstack([population, own]), body.depth, body.full_data)[0]
        return GAGenerationReply(
            fitness=fitness[:-1], structure=own, structure_fitness=float(fitness[-1]), noisy_count=state.noisy_count
        )

    def on_finish(self, message: Message) -> GAFinishReply:
        body: GAFinishRequest = message.body
        state = self._job(message, body.task)
        population = self._population(state, body.population, body.depth)
        fitness, grown = state.fitness(population, body.depth, body.full_data)
        chosen = int(np.argmin(fitness) if state.regression else np.argmax(fitness))
        task = body.task
        classes = tuple(int(c) if task.integer_classes else c for c in task.classes)
        model = to_ensemble(
            grown,
            chosen,
            feature_names=state.feature_names,
            classes=classes,
            feature_set_version=task.feature_set_version,
            metadata={
                "algorithm": "fedga_tree",
                "gateway": self.client_id,
                "depth": body.depth,
                "validation_fitness": float(fitness[chosen]),
            },
        )
        return GAFinishReply(model=model.to_cbor(), chosen=chosen, fitness=float(fitness[chosen]))
