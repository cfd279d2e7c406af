"""FedGA-Tree's server half (paper Alg. 1): a genetic algorithm over tree *structures* whose
fitness the clients measure on their own data; every client ends with its own tree.

The server never fits a tree. It keeps a population of integer strings (decision-node features
in pre-order, ``shared.tree_encoding``), asks the clients to fit each structure by CART on their
data and to score it, averages the scores weighted by the clients' noisy sample counts, and
breeds the next population (``fedga_operators``). At the end each client fits the final
population, keeps the structure that scores best on its own data and returns that tree: a
personal, readable model, registered for that gateway only (:func:`register_models`).

Rounds: ``data_shape``; ``depth`` (CV depths, noisy counts; median depth); ``structure`` (the
clients' own CART structures, regression votes); one ``generation`` round per generation (one
fitness vector per active client); ``finish``. Partial participation: each generation asks a
random share ``active_fraction`` of the clients; a client asked for the first time also sends
its structure and noisy count (a late joiner, steps 29-33); a client that does not answer is left
out of that generation's average.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from shared.model import TreeEnsemble
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
from shared.protocol.messages.fleet_sums import DataShape, DataShapeRequest
from shared.tree_encoding import canonical, check_strings, string_length

from ..jobs import FederatedJob, StepProgress, TrainingError
from .fedga_operators import Survivors, initial_population, reproduce, survivors
from .fleet_data import fleet_vocabulary, keep_majority_width

if TYPE_CHECKING:
    from ..registry import ModelRecord, Registry

__all__ = ["FedGAResult", "FedGATree", "median_depth", "register_models", "weighted_fitness"]


def median_depth(depths: list[int]) -> int:
    """Step 10: the median of the clients' depths (it resists outliers), as an integer depth.

    The median of an even number of depths is the mean of the two middle ones; when that falls
    half-way between two depths, the deeper one is taken (a half rounds up).

    Parameters
    ----------
    depths : list of int
        The depths the clients' cross-validation chose.

    Returns
    -------
    int
        The job's depth.
    """
    return int(np.floor(np.median(np.asarray(depths, dtype=np.float64)) + 0.5))


def weighted_fitness(fitness: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Step 37: per candidate, the clients' fitness averaged with their noisy counts as weights
    (``fitness``: (clients, P); a noisy count below 1 weighs 1, so noise cannot flip a sign)."""
    weights = np.maximum(counts, 1.0)
    return weights @ fitness / weights.sum()


@dataclass(frozen=True)
class FedGAResult:
    """What a FedGA-Tree job produced: each client's model, the final population (best first)
    with its aggregated fitness, the job's depth and strategies, and per generation the best
    aggregated fitness and who answered."""

    models: dict[str, TreeEnsemble]
    population: np.ndarray
    fitness: np.ndarray
    depth: int
    elitism: bool
    full_data: bool
    best_fitness: list[float] = field(default_factory=list)
    answered: list[tuple[str, ...]] = field(default_factory=list)


@dataclass(frozen=True)
class FedGATree:
    """Federated genetic-algorithm decision trees (FedGA-Tree): one personalised tree per client.

    The defaults are the paper's Table II; each parameter's symbol in the paper is in brackets.

    Parameters
    ----------
    task : {"classification", "regression"}
        Fitness is macro F1 (classification) or MSE (regression) on the client's validation part.
    population_size : int, optional
        [P] Structures per generation; default 20 (classification) or 40 (regression). The
        initial population holds every initial client's structure, so it may be larger.
    generations : int, default 100
        [G] Generations of evaluation and breeding.
    train_ratio : float, default 0.8
        [r] Share of a client's data that fits a structure's thresholds and leaves; the rest
        scores it. Regression may switch to 1 (fit and score on all data) by vote, Eq. 1.
    leaf_ratio : float, default 0.01
        [r_l] Probability that a slot of a random initial structure is a leaf.
    tournament_size : int, default 3
        [s] Tournament selection pressure.
    mutation_rates : (float, float), default (0.05, 0.05)
        [m_1, m_2] Node flips and node swaps per mutation, as shares of the string length (at
        least one).
    epsilon : float or None, default 1.0
        [epsilon] Laplace budget of each client's sample count; ``None`` sends exact counts
        (experiments only).
    active_fraction : float, default 1.0
        [c] Share of clients asked in the opening and in each generation.
    d_min, d_max : int, default 2, 15
        [d_min, d_max] Depth range of the clients' cross-validation.
    cv_folds : int, default 5
        [K] Folds of that cross-validation.
    elitism : bool, optional
        Keep the clients' own structures in every generation, besides the P fittest (which
        offspring still compete for). ``None``: regression decides by vote (Eq. 2, mu_star),
        classification does not.
    full_data : bool, optional
        Fit and score on all local data (r = 1). ``None``: regression decides by vote (Eq. 1,
        phi_star and theta_star), classification uses ``train_ratio``.
    phi_star, theta_star, mu_star : float, default 0.25, 0.02, 80
        [phi*, theta*, mu*] Thresholds of the regression votes.
    feature_set_version : str, default ""
        The feature set the gateways train on.

    Examples
    --------
    >>> import numpy as np, aggregator
    >>> rng = np.random.default_rng(0)
    >>> clients = []
    >>> for _ in range(3):
    ...     X = rng.normal(size=(120, 4)); clients.append((X, (X[:, 0] > 0).astype(int)))
    >>> models = aggregator.simulate(FedGATree(generations=3, d_max=4), clients, seed=1)
    >>> sorted(models), models["client-000"].kind
    (['client-000', 'client-001', 'client-002'], 'single')
    """

    task: Literal["classification", "regression"] = "classification"
    population_size: int | None = None
    generations: int = 100
    train_ratio: float = 0.8
    leaf_ratio: float = 0.01
    tournament_size: int = 3
    mutation_rates: tuple[float, float] = (0.05, 0.05)
    epsilon: float | None = 1.0
    active_fraction: float = 1.0
    d_min: int = 2
    d_max: int = 15
    cv_folds: int = 5
    elitism: bool | None = None
    full_data: bool | None = None
    phi_star: float = 0.25
    theta_star: float = 0.02
    mu_star: float = 80.0
    feature_set_version: str = ""

    name: ClassVar[str] = "fedga_tree"

    def __post_init__(self) -> None:
        positive_int = lambda v, low: isinstance(v, int) and not isinstance(v, bool) and v >= low  # noqa: E731
        checks = [
            ("task", self.task in ("classification", "regression"), "'classification' or 'regression'"),
            (
                "population_size",
                self.population_size is None or positive_int(self.population_size, 2),
                "None or an integer >= 2",
            ),
            ("generations", positive_int(self.generations, 0), "an integer >= 0"),
            ("train_ratio", 0 < self.train_ratio <= 1, "in (0, 1]"),
            ("leaf_ratio", 0 <= self.leaf_ratio <= 1, "in [0, 1]"),
            ("tournament_size", positive_int(self.tournament_size, 1), "an integer >= 1"),
            (
                "mutation_rates",
                len(self.mutation_rates) == 2 and all(0 <= m <= 1 for m in self.mutation_rates),
                "two shares in [0, 1]",
            ),
            ("epsilon", self.epsilon is None or self.epsilon > 0, "> 0 or None"),
            ("active_fraction", 0 < self.active_fraction <= 1, "in (0, 1]"),
            (
                "d_min",
                positive_int(self.d_min, 1) and positive_int(self.d_max, self.d_min) and self.d_max <= 15,
                "an integer with 1 <= d_min <= d_max <= 15",
            ),
            ("cv_folds", positive_int(self.cv_folds, 2), "an integer >= 2"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(
                    f"{name} must be {expected}, got {getattr(self, name)!r}"
                    + (f" (d_max={self.d_max!r})" if name == "d_min" else "")
                )

    @property
    def regression(self) -> bool:
        return self.task == "regression"

    @property
    def size(self) -> int:
        """P: the population size (Table II: 20 for classification, 40 for regression)."""
        return self.population_size or (40 if self.regression else 20)

    def fit(self, job: FederatedJob, *, seed: int = 0) -> dict[str, TreeEnsemble]:
        """Train; returns ``{client id: that client's tree}`` (see :meth:`run` for the rest)."""
        return self.run(job, seed=seed).models

    def _active(self, rng: np.random.Generator, clients: list[str]) -> list[str]:
        k = max(1, int(round(self.active_fraction * len(clients))))
        return sorted(rng.choice(clients, size=k, replace=False).tolist()) if k < len(clients) else list(clients)

    def run(self, job: FederatedJob, *, seed: int = 0) -> FedGAResult:
        """Alg. 1 over ``job``'s clients, deterministic in ``seed``."""
        rng = np.random.default_rng(seed)
        shapes = job.ask(DataShapeRequest(self.feature_set_version, labels=not self.regression), job.clients, DataShape)
        if not shapes:
            raise TrainingError("no client described its data")
        n_features = keep_majority_width(job, shapes)
        if n_features < 1:
            raise TrainingError("the clients' data have no features")
        vocabulary, model_classes = fleet_vocabulary(shapes, None, self.regression)
        if not self.regression and len(vocabulary) < 2:
            raise TrainingError(f"classification needs at least 2 classes in the fleet, got {list(vocabulary)}")
        clients = list(shapes)
        task = GATask(
            self.task,
            self.feature_set_version,
            seed,
            classes=tuple(vocabulary),
            integer_classes=bool(model_classes) and isinstance(model_classes[0], int),
            cv_folds=self.cv_folds,
            d_min=self.d_min,
            d_max=self.d_max,
            train_ratio=self.train_ratio,
            epsilon=self.epsilon,
            phi_star=self.phi_star,
            theta_star=self.theta_star,
            mu_star=self.mu_star,
        )
        opening = self._active(rng, clients)
        depths = job.ask(GADepthRequest(task), opening, GADepthReply)
        for client in [c for c, r in depths.items() if not self.d_min <= r.depth <= self.d_max]:
            job.reject(client, f"depth {depths.pop(client).depth} outside [{self.d_min}, {self.d_max}]")
        if not depths:
            raise TrainingError("no client proposed a depth")
        depth = median_depth([r.depth for r in depths.values()])
        counts = {c: r.noisy_count for c, r in depths.items()}
        replies = job.ask(GAStructureRequest(task, depth), list(depths), GAStructureReply)
        local = {}
        for client, reply in replies.items():
            structure = self._structure(job, client, reply.structure, depth, n_features)
            if structure is not None:
                local[client] = structure
                counts[client] = reply.noisy_count
        if not local:
            raise TrainingError("no client sent its structure")
        majority = len(local) / 2
        full_data = (
            self.full_data
            if self.full_data is not None
            else (self.regression and sum(replies[c].vote_full_data for c in local) > majority)
        )
        elitism = (
            self.elitism
            if self.elitism is not None
            else (self.regression and sum(replies[c].vote_elitism for c in local) > majority)
        )
        joined = set(local)
        size = self.size
        own = np.array([local[c] for c in sorted(local)], np.int64)
        offspring = np.concatenate(
            [
                initial_population(
                    rng, max(size - own.shape[0], 0), n_features=n_features, depth=depth, leaf_ratio=self.leaf_ratio
                ),
                own,
            ]
        )
        offspring_local = np.r_[np.zeros(offspring.shape[0] - own.shape[0], bool), np.ones(own.shape[0], bool)]
        population = Survivors(np.zeros((0, string_length(depth)), np.int64), np.zeros(0), np.zeros(0, bool))
        best, answered = [], []
        sign = -1.0 if self.regression else 1.0  # the operators maximise
        for generation in range(1, self.generations + 1):
            started = time.monotonic()
            active = self._active(rng, clients)
            requests = {
                c: GAGenerationRequest(task, depth, generation, offspring, full_data, join=c not in joined)
                for c in active
            }
            replies_g = job.ask(requests, active, GAGenerationReply)
            fitness_rows, weights, newcomers = [], [], []
            for client, reply in replies_g.items():
                if reply.fitness.shape != (offspring.shape[0],):
                    job.reject(client, f"{reply.fitness.shape[0]} fitness values for {offspring.shape[0]} candidates")
                    continue
                if client not in joined:
                    structure = self._structure(job, client, reply.structure, depth, n_features)
                    if structure is None:
                        continue
                    newcomers.append((client, structure, reply.structure_fitness))
                    counts[client] = reply.noisy_count
                fitness_rows.append(reply.fitness)
                weights.append(counts[client])
            answered.append(tuple(replies_g))
            if fitness_rows:
                scored = sign * weighted_fitness(np.array(fitness_rows), np.array(weights))
                new = np.array([s for _, s, _ in newcomers], np.int64).reshape(-1, offspring.shape[1])
                candidates = np.concatenate([offspring, new])
                scored = np.concatenate([scored, sign * np.array([f for _, _, f in newcomers])])
                is_local = np.r_[offspring_local, np.ones(new.shape[0], bool)]
                population = survivors(population, candidates, scored, is_local, size=size, elitism=elitism)
                joined.update(c for c, _, _ in newcomers)
            elif population.strings.shape[0] == 0:
                raise TrainingError(f"generation {generation}: no client scored the initial population")
            best.append(float(sign * population.fitness[0]))
            progress = StepProgress(
                job.job_id,
                self.name,
                generation,
                self.generations,
                len(active),
                len(fitness_rows),
                {"best_fitness": best[-1]},
                time.monotonic() - started,
            )
            job.report(progress)
            if generation == self.generations or job.stop_here(progress):
                break
            offspring = reproduce(
                rng,
                population.strings,
                population.fitness,
                size=size,
                tournament_size=self.tournament_size,
                flip_rate=self.mutation_rates[0],
                swap_rate=self.mutation_rates[1],
                n_features=n_features,
            )
            offspring_local = np.zeros(offspring.shape[0], bool)
        if population.strings.shape[0] == 0:  # generations=0: the initial population, unscored
            population = Survivors(offspring, np.full(offspring.shape[0], np.nan), offspring_local)
        final = canonical(population.strings, depth)
        finished = job.ask(GAFinishRequest(task, depth, final, full_data), clients, GAFinishReply)
        models = {}
        for client, reply in finished.items():
            try:
                models[client] = TreeEnsemble.from_cbor(reply.model)
            except Exception as exc:  # noqa: BLE001 - one bad model must not lose the others
                job.reject(client, f"unusable model: {type(exc).__name__}")
        return FedGAResult(
            models, final, sign * population.fitness, depth, bool(elitism), bool(full_data), best, answered
        )

    @staticmethod
    def _structure(
        job: FederatedJob, client: str, structure: np.ndarray, depth: int, n_features: int
    ) -> np.ndarray | None:
        """A client's structure, canonical, or ``None`` (rejected) if it does not fit the job."""
        try:
            return canonical(check_strings(structure[None, :], depth, n_features, name="structure"), depth)[0]
        except ValueError as exc:
            job.reject(client, str(exc))
            return None


def register_models(
    registry: Registry,
    model_id: str,
    models: dict[str, TreeEnsemble],
    *,
    metrics: dict[str, dict] | None = None,
    config: dict | None = None,
    job_id: str = "",
) -> dict[str, ModelRecord]:
    """Record each client's tree as its own registry entry ``{model_id}.{client}`` targeted at
    that gateway (``Registry.add(..., target=client)``), so that a deploy signs it for that
    gateway only; ``config`` and ``job_id`` are recorded with each (the server's jobs). Returns
    the records by client."""
    return {
        client: registry.add(
            f"{model_id}.{client}",
            model,
            target=client,
            metrics=(metrics or {}).get(client),
            config=config,
            job_id=job_id,
        )
        for client, model in sorted(models.items())
    }
