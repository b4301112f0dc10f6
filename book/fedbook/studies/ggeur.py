r"""GGEUR's experiments: the label-skew and domain-skew runs per run seed on frozen embeddings,
the geometry similarity between domains, and the values per seed that the claims compare (the
chapter *GGEUR: label skew and domain skew on digit embeddings*, ``notebooks/ggeur_experiments.py``).

From GGEUR (Dai, Huang, Chen et al., "Geometric Knowledge-Guided Localized Global Distribution
Alignment for Federated Learning", CVPR 2025): Section 4.2 (label skew, Tables 1-3), Section 4.3
(domain skew, Table 4 and its ablation), Section 3.2.2 (Figure 6, the similarity of class shapes
across domains) and Section 4.5 (convergence, Figure 8).

:class:`GGEURStudy` holds what is embedded and trained; :meth:`GGEURStudy.run_label` runs the
label-skew experiment for every seed and concentration and returns a :class:`LabelRuns`,
:meth:`GGEURStudy.run_domain` the domain-skew experiment and returns a :class:`DomainRuns`; their
methods give the values per seed the chapter's claims compare. The label-skew encoder is trained
once and frozen for every seed (:meth:`GGEURStudy.label_embeddings`), the domain-skew one per seed
(:meth:`GGEURStudy.domain_federation`); the first seed's are reused by the worked solutions. A
seed beyond the chapter's full seeds makes the headline runs only (:data:`HEADLINE_LABEL`,
:data:`HEADLINE_DOM`). The pieces are free functions: :func:`similarity_rows`,
:func:`diagonal_gap`, :func:`encoder_column` and :func:`claims_reading`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from fedlib.algorithms import GGEUR, FedAvg, FedFAStyle, FedMixStyle, FedProto, FedProx
from fedlib.algorithms.ggeur import Rebalanced, augmented_size, classifier_fn, filled_size, matched_train
from fedbook.claims import DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, ClaimResult, says
from fedlib.data import ArrayDataset, load_dataset, make_digit_domains
from fedlib.encoders import FrozenEncoder, OpenCLIPEncoder, encode_dataset, public_split, train_public_encoder
from fedlib.federation import Federation, make_federation, one_client_per_domain
from fedlib.geometry import SIMILARITY_METHODS, class_shapes, similarity_matrix
from fedlib.loop import LoopConfig
from fedlib.results import RunResult
from fedlib.run import RunOptions
from fedbook.parallel import map_parallel
from fedlib.protocol import Algorithm
from fedlib.rng import DATA_SUBSET, numpy_rng
from fedlib.run import run_federated
from fedlib.stats import ClassMoments
from fedlib.training import TrainConfig
from fedlib.validation import check_int, check_real

GGEUR_CODE = "+GGEUR (code: N(x, Σ))"
"""The label-skew row of GGEUR with the authors' code formula :math:`\\mathcal N(x, \\Sigma)` (every claim's GGEUR)."""
GGEUR_PAPER = "+GGEUR (paper: λ scaling)"
"""The label-skew row of GGEUR with the paper's text formula."""
LABEL_METHODS = ("FedAvg", "FedAvg, matched steps", "FedAvg, rebalanced", GGEUR_CODE, GGEUR_PAPER, "FedMix-style",
                 "FedMix-style, matched steps", "FedFA-style")
"""The label-skew runs of every seed and concentration (:meth:`GGEURStudy.label_methods`), in the table's order."""
LOW_BETA_ONLY = ("FedMix-style, matched steps",)
"""The label-skew runs made at the lowest concentration only (the one control that reads them is declared there)."""
HEADLINE_LABEL = ("FedAvg", GGEUR_CODE)
"""The label-skew runs of the headline claims: the only runs of a seed beyond the chapter's full seeds."""
BASES = ("FedAvg", "FedProx", "FedProto")
"""The domain-skew bases, each run alone and with GGEUR's steps."""
ABLATION_BASES = ("FedAvg", "FedProx")
"""The bases of the step-by-step ablation (the paper's covers FedAvg and MOON; FedProx stands in for MOON): only
these also run GGEUR's step 1 alone."""
STEP1, STEPS12 = "+ GGEUR (step 1)", "+ GGEUR (steps 1 & 2)"
"""The domain-skew variants of a base with GGEUR's step 1, and with steps 1 and 2."""
DOM_ORDER = ([(b, v) for b in BASES for v in ((b, STEP1, STEPS12) if b in ABLATION_BASES else (b, STEPS12))]
             + [("FedAvg", "FedAvg, matched steps"), ("FedAvg", "FedMix-style"), ("FedAvg", "FedFA-style")])
"""The domain-skew runs of a full seed, ``(base, variant)``, in the table's order (:meth:`GGEURStudy.domain_runs`)."""
HEADLINE_DOM = [(b, v) for b in BASES for v in (b, STEPS12)]
"""The domain-skew runs of the headline claims: the only runs of a seed beyond the chapter's full seeds."""
DOMAINS = ("mnist", "uci", "mnist_rotated", "mnist_inverted")
"""The digit domains (:func:`fedlib.data.datasets.make_digit_domains`); the first is the one the similarity rows compare with."""
ENCODER_SEES = ("all", "mnist")
"""What the domain encoder trains on: every domain's public part, or MNIST's only."""
SAME, DIFFERENT, ROWMAX = "mean S, same class", "mean S, different classes", "classes whose diagonal is its row's maximum"
"""The columns of :func:`similarity_rows` (besides ``seed`` and ``other domain``)."""
GAIN_STEP2 = "gain of step 2 over step 1, AVG (points)"
"""The row of :func:`encoder_column` that exercise 3 reads for step 2."""


def similarity_rows(seed: int, domains: ArrayDataset, embeddings: ArrayDataset, k: int,
                    method: str = "paper") -> tuple[list[dict], dict[str, np.ndarray]]:
    """The geometry similarity between the first domain's classes and every other domain's.

    Each domain's class shapes (:func:`fedlib.geometry.class_shapes`) come from its embedded
    images; :math:`S` (:func:`fedlib.geometry.similarity_matrix` with ``k`` and ``method``)
    compares every class of the first domain (rows) with every class of the other (columns).

    Parameters
    ----------
    seed : int
        Written into every row.
    domains : ArrayDataset
        Names the domains (``domain_names``; the first is compared with the others).
    embeddings : ArrayDataset
        The embedded images, with their ``domain`` index.
    k : int
        The top eigenvectors :math:`S` reads (>= 1).
    method : {"paper", "subspace"}
        The similarity.

    Returns
    -------
    rows : list of dict
        Per other domain: ``seed``, ``other domain``, the mean :math:`S` on the diagonal
        (:data:`SAME`) and off it (:data:`DIFFERENT`), and how many rows have their maximum on
        the diagonal (:data:`ROWMAX`).
    matrices : dict of str to ndarray
        :math:`S` per other domain.

    Examples
    --------
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.randn(120, 4, generator=g), torch.arange(120) % 3
    >>> ds = ArrayDataset(x, y, 3, "toy", domain=torch.arange(120) // 60, domain_names=["mnist", "other"])
    >>> rows, mats = similarity_rows(0, ds, ds, k=2)
    >>> [r["other domain"] for r in rows], mats["other"].shape
    (['other'], (3, 3))
    """
    check_int("k", k, low=1)
    if method not in SIMILARITY_METHODS:
        raise ValueError(f"unknown similarity method {method!r}; valid: {', '.join(SIMILARITY_METHODS)}")
    if embeddings.domain is None:
        raise ValueError("embeddings must carry each image's domain (ArrayDataset.domain), got none")
    names = list(domains.domain_names or [])
    if len(names) < 2:
        raise ValueError(f"the similarity compares the first domain with the others: domains must name 2 or more, got {names}")
    if embeddings.domain_names is not None and list(embeddings.domain_names) != names:
        raise ValueError(f"domains names {names} but the embeddings' domains are {list(embeddings.domain_names)}")
    n = embeddings.n_classes
    shapes = {}
    for d, dname in enumerate(names):
        sel = embeddings.domain == d
        shapes[dname] = class_shapes(ClassMoments.from_features(embeddings.x[sel], embeddings.y[sel], n))
    out, mats = [], {}
    for other in names[1:]:
        S = similarity_matrix(shapes[names[0]], shapes[other], k=k, method=method).numpy()
        mats[other] = S
        out.append({"seed": seed, "other domain": other, SAME: float(np.nanmean(np.diag(S))),
                    DIFFERENT: float(np.nanmean(S[~np.eye(n, dtype=bool)])),
                    ROWMAX: float((np.nanargmax(S, axis=1) == np.arange(n)).sum())})
    return out, mats


def diagonal_gap(rows: Sequence[Mapping[str, float]]) -> float:
    """The mean over :func:`similarity_rows`'s rows of :math:`S` on the diagonal minus off it.

    Examples
    --------
    >>> diagonal_gap([{SAME: 3.0, DIFFERENT: 1.0}, {SAME: 2.0, DIFFERENT: 1.5}])
    1.25
    """
    return float(np.mean([r[SAME] - r[DIFFERENT] for r in rows]))


def encoder_column(runs: Mapping[str, Mapping[str, float]], seed: int, domains: ArrayDataset,
                   embeddings: ArrayDataset, k: int) -> dict[str, float]:
    """One encoder's column of exercise 3: FedAvg's AVG and STD over the domains, the gains of
    GGEUR's step 1 over FedAvg and of step 2 over step 1 (:data:`GAIN_STEP2`), and
    :func:`diagonal_gap` under the paper's and the subspace similarity.

    ``runs`` maps ``"FedAvg"``, :data:`STEP1` and :data:`STEPS12` to a run's ``AVG`` and ``STD``
    (:meth:`GGEURStudy.domain_row`); ``embeddings`` are that encoder's."""
    return {"AVG, FedAvg (%)": runs["FedAvg"]["AVG"], "STD, FedAvg (points)": runs["FedAvg"]["STD"],
            "gain of step 1 over FedAvg, AVG (points)": runs[STEP1]["AVG"] - runs["FedAvg"]["AVG"],
            GAIN_STEP2: runs[STEPS12]["AVG"] - runs[STEP1]["AVG"],
            "S same − different classes, paper's S": diagonal_gap(similarity_rows(seed, domains, embeddings, k)[0]),
            "S same − different classes, subspace S":
                diagonal_gap(similarity_rows(seed, domains, embeddings, k, method="subspace")[0])}


VS_COPIES = {HOLDS: "generated samples beat copies of real samples at the same class counts",
             DOES_NOT_HOLD: "copies of real samples at GGEUR's class counts do better",
             INCONCLUSIVE: "generated samples and copies of real samples at the same class counts cannot be told apart at this scale"}
"""The rebalancing-only control's verdict in words (:func:`claims_reading`)."""
VS_STEPS = {HOLDS: "the lead survives giving the baseline GGEUR's local steps",
            DOES_NOT_HOLD: "the baseline given GGEUR's local steps does better",
            INCONCLUSIVE: "with GGEUR's local steps the baseline cannot be told apart from GGEUR at this scale"}
"""A matched-steps control's verdict in words (:func:`claims_reading`)."""


def claims_reading(results: Mapping[str, ClaimResult], betas: Sequence[float]) -> str:
    """The claims read with their controls: a paragraph computed from the verdicts of the
    chapter's rows (``results``, :func:`fedbook.page.claims_report`'s output), per concentration
    of ``betas`` and then early in training and under domain skew.

    Raises
    ------
    KeyError
        A row the paragraph reads that ``results`` lacks.
    """
    def v(key):
        return results[key].verdict

    def s(key):
        return says(results[key])

    parts = []
    b_lo = min(betas)
    for b in betas:
        parts.append(f"At β = {b}, {s(f'label-gain-{b}')}; its rebalancing-only control {s(f'ctrl-rebalanced-{b}')}: "
                     f"{VS_COPIES[v(f'ctrl-rebalanced-{b}')]}; its matched-steps control {s(f'ctrl-matched-{b}')}: "
                     f"{VS_STEPS[v(f'ctrl-matched-{b}')]}. Against every other method, {s(f'label-outperforms-{b}')}"
                     + (f", and FedMix-style given GGEUR's local steps: {s(f'ctrl-fedmix-matched-{b}')}." if b == b_lo else "."))
    gained = [b for b in betas if v(f"label-gain-{b}") == HOLDS]
    beyond = [b for b in gained if v(f"ctrl-rebalanced-{b}") == HOLDS]
    if not gained:
        parts.append("No label-skew gain over FedAvg holds, so there is no gain to attribute to the geometry or to the class balance.")
    elif beyond == gained:
        parts.append("Is GGEUR's gain only class rebalancing? Not here: every gain that holds is also ahead of rebalancing alone.")
    elif not beyond:
        parts.append("Is GGEUR's gain only class rebalancing? At this scale it is not shown to be more: none of the gains that hold "
                     "is ahead of rebalancing alone.")
    else:
        parts.append(f"Is GGEUR's gain only class rebalancing? At β = {', '.join(map(str, beyond))} the gain is ahead of rebalancing "
                     f"alone; at β = {', '.join(str(b) for b in gained if b not in beyond)} it is not shown to be.")
    parts.append(f"Early in training, {s('label-convergence')}; with matched steps {s('ctrl-convergence-matched')}; "
                 f"on smoothness, {s('label-smoother')}.")
    parts.append(f"Under domain skew, {s('dom-gain-FedAvg')}; its matched-steps control {s('ctrl-dom-matched')}: "
                 f"{VS_STEPS[v('ctrl-dom-matched')]}; against the two peer baselines {s('digits-vs-peers')}.")
    return " ".join(parts)


class LabelSetup(NamedTuple):
    """One seed's label-skew embeddings (:meth:`GGEURStudy.label_embeddings`)."""

    encoder: FrozenEncoder
    embeddings: ArrayDataset
    n_public: int


class DomainSetup(NamedTuple):
    """One seed's domain-skew federation (:meth:`GGEURStudy.domain_federation`)."""

    domains: ArrayDataset
    public: np.ndarray
    encoder: FrozenEncoder
    embeddings: ArrayDataset
    federation: Federation
    sizes: dict
    n_public: int


@dataclass
class LabelRuns:
    """What :meth:`GGEURStudy.run_label` computed.

    Attributes
    ----------
    table : DataFrame
        ``seed, beta, method, accuracy (%), early (%)``: the global accuracy at the end and after
        ``early`` training rounds (:class:`GGEURStudy`), one row per seed, concentration and run.
    curves : dict
        ``(seed, beta, method)``: the global accuracy (a fraction) per training round.
    seconds : float
        The time the runs took, added up over the seeds.
    """

    table: pd.DataFrame
    curves: dict = field(default_factory=dict)
    seconds: float = 0.0

    def _column(self, column: str, beta: float, method: str, seeds: Sequence[int] | None = None) -> pd.Series:
        """Per seed (in seed order), one run's ``column``: on the seeds that made the run
        (``seeds=None``) or on ``seeds``, each of which must have made it; a clear error on what
        the table lacks."""
        if column not in ("accuracy (%)", "early (%)"):
            raise ValueError(f"unknown column {column!r}; valid: 'accuracy (%)', 'early (%)'")
        t = self.table
        if not ((t.beta == beta) & (t.method == method)).any():
            raise ValueError(f"no label-skew run {method!r} at beta = {beta!r}; betas: {sorted(set(t.beta))}, "
                             f"runs: {', '.join(dict.fromkeys(t.method))}")
        per_seed = t.pivot_table(index="seed", columns=["beta", "method"], values=column)[(beta, method)].dropna()
        if seeds is None:
            return per_seed
        missing = [s for s in seeds if s not in per_seed.index]
        if missing:
            raise ValueError(f"the label-skew run {method!r} at beta = {beta!r} was not made on seeds {missing}; "
                             f"it was on {per_seed.index.tolist()}")
        return per_seed.reindex(list(seeds))

    def accuracy(self, beta: float, method: str, seeds: Sequence[int] | None = None) -> np.ndarray:
        """Per seed (in seed order, or the order of ``seeds``), ``method``'s global accuracy (%) at ``beta``."""
        return self._column("accuracy (%)", beta, method, seeds).to_numpy()

    def early(self, beta: float, method: str, seeds: Sequence[int] | None = None) -> np.ndarray:
        """Per seed, ``method``'s global accuracy (%) after the early rounds at ``beta``."""
        return self._column("early (%)", beta, method, seeds).to_numpy()

    def drops(self, beta: float, method: str, seeds: Sequence[int]) -> np.ndarray:
        """Per seed of ``seeds``, the drops of ``method``'s global-accuracy curve at ``beta``: the sum
        over training rounds :math:`t \\ge 1` of :math:`\\max(0, a_t - a_{t+1})`, in points (0 for a
        curve that never falls; the statistics round 0 of an augmentation method is not read).

        Examples
        --------
        >>> runs = LabelRuns(pd.DataFrame(), {(0, 0.1, "A"): pd.Series([0.1, 0.5, 0.4, 0.6, 0.55], index=[0, 1, 2, 3, 4])})
        >>> runs.drops(0.1, "A", [0]).round(6).tolist()  # 50 -> 40 and 60 -> 55: 10 + 5 points
        [15.0]
        """
        out = []
        for s in seeds:
            if (s, beta, method) not in self.curves:
                raise ValueError(f"no curve of {method!r} at beta = {beta!r} for seed {s!r}")
            a = 100 * self.curves[(s, beta, method)]
            a = a[a.index >= 1].to_numpy(dtype=float)
            out.append(float(np.clip(a[:-1] - a[1:], 0.0, None).sum()))
        return np.array(out)

    def mean(self, beta: float, method: str, column: str = "accuracy (%)", seeds: Sequence[int] | None = None) -> float:
        """The mean over the seeds (those that made the run, or ``seeds``) of ``column``
        (``"accuracy (%)"`` or ``"early (%)"``)."""
        return float(self._column(column, beta, method, seeds).mean())

    def of_seed(self, seed: int, beta: float, method: str) -> float:
        """One seed's global accuracy (%) of ``method`` at ``beta``."""
        per_seed = self._column("accuracy (%)", beta, method)
        if seed not in per_seed.index:
            raise ValueError(f"no run seed {seed!r}; the seeds: {per_seed.index.tolist()}")
        return float(per_seed.loc[seed])


@dataclass
class DomainRuns:
    """What :meth:`GGEURStudy.run_domain` computed.

    Attributes
    ----------
    table : DataFrame
        ``seed, base, method``, the accuracy (%) on each domain's test set, ``AVG`` and ``STD``
        (points) over the domains, one row per seed and run of :data:`DOM_ORDER`.
    similarity : DataFrame
        :func:`similarity_rows` of every seed.
    first_matrices : dict of str to ndarray
        The first seed's similarity matrices.
    seeds : list of int
        The run seeds, in order.
    seconds : float
        The time the runs took, added up over the seeds.
    """

    table: pd.DataFrame
    similarity: pd.DataFrame
    first_matrices: dict
    seeds: list
    seconds: float = 0.0

    def _check(self, base: str, method: str, seed: int | None = None) -> None:
        t = self.table
        if (base, method) not in set(zip(t.base, t.method)):
            raise ValueError(f"no domain-skew run ({base!r}, {method!r}); valid: {DOM_ORDER}")
        if seed is not None and seed not in self.seeds:
            raise ValueError(f"no run seed {seed!r}; the seeds: {self.seeds}")

    def value(self, base: str, method: str, column: str = "AVG", seeds: Sequence[int] | None = None) -> np.ndarray:
        """Per seed, a run's ``column`` (``"AVG"``, ``"STD"`` or a domain's name): on the seeds that
        made the run, in the seeds' order (``seeds=None``), or on ``seeds``, each of which must have made it."""
        self._check(base, method)
        columns = [c for c in self.table.columns if c not in ("seed", "base", "method")]
        if column not in columns:
            raise ValueError(f"unknown column {column!r}; valid: {', '.join(columns)}")
        d = self.table.set_index(["seed", "base", "method"])
        per_seed = d.xs((base, method), level=("base", "method"))[column]
        made = [s for s in self.seeds if s in per_seed.index]
        if seeds is None:
            return per_seed.reindex(made).to_numpy()
        missing = [s for s in seeds if s not in per_seed.index]
        if missing:
            raise ValueError(f"the domain-skew run ({base!r}, {method!r}) was not made on seeds {missing}; it was on {made}")
        return per_seed.reindex(list(seeds)).to_numpy()

    def row(self, seed: int, base: str, method: str) -> pd.Series:
        """One seed's row of a run."""
        self._check(base, method, seed)
        return self.table.set_index(["seed", "base", "method"]).loc[(seed, base, method)]

    @property
    def similarity_seeds(self) -> list:
        """The seeds whose similarity rows were computed, in the seeds' order."""
        have = set(self.similarity["seed"])
        return [s for s in self.seeds if s in have]

    def similarity_per_seed(self) -> pd.DataFrame:
        """Per seed of :attr:`similarity_seeds` (rows, in order), :data:`SAME` and :data:`DIFFERENT`
        averaged over the other domains."""
        return self.similarity.groupby("seed")[[SAME, DIFFERENT]].mean().reindex(self.similarity_seeds)

    def diagonal_gaps(self) -> pd.DataFrame:
        """Per seed of :attr:`similarity_seeds` (rows) and other domain (columns, in their order):
        :data:`SAME` − :data:`DIFFERENT`, one heat map's diagonal lead.

        Examples
        --------
        >>> sims = pd.DataFrame([{"seed": 0, "other domain": o, SAME: 2.0 + j, DIFFERENT: 1.0} for j, o in enumerate("ab")])
        >>> DomainRuns(pd.DataFrame(), sims, {}, [0]).diagonal_gaps().to_dict("list")
        {'a': [1.0], 'b': [2.0]}
        """
        sim = self.similarity
        gaps = sim.assign(gap=sim[SAME] - sim[DIFFERENT]).pivot(index="seed", columns="other domain", values="gap")
        return gaps.reindex(index=self.similarity_seeds, columns=list(dict.fromkeys(sim["other domain"])))

    def rowmax_share(self, n_classes: int) -> np.ndarray:
        """Per seed of :attr:`similarity_seeds`, the share of the first domain's rows whose maximum
        is on the diagonal, over every other domain (a fraction of ``n_classes`` × the other domains)."""
        n_others = self.similarity["other domain"].nunique()
        return (self.similarity.groupby("seed")[ROWMAX].sum().reindex(self.similarity_seeds)
                / (n_classes * n_others)).to_numpy()


@dataclass(frozen=True)
class GGEURStudy:
    """What the chapter embeds and trains for every run seed.

    Label skew (:meth:`label_seed`): MNIST-5k, a public split trains the encoder, the rest is
    embedded and split over ``n_clients`` clients with a Dirichlet skew per concentration; every
    run of :data:`LABEL_METHODS` trains a linear classifier. Domain skew (:meth:`domain_seed`):
    the :data:`DOMAINS`, one client per domain, every run of :data:`DOM_ORDER` trains an MLP.

    Parameters
    ----------
    n_samples : int or None
        The label-skew data's size (a subset seeded by the run seed; ``None``: all of MNIST-5k).
    public_fraction, domain_public : float
        The public share of the label-skew data, and of each domain.
    encoder_epochs, encoder_width : int
        The public-split encoder (:func:`fedlib.encoders.train_public_encoder`).
    n_clients, global_test_per_class : int
        The label-skew federation.
    total_per_class, per_prototype : int
        GGEUR's step 1 (every held class filled to this many samples) and step 2 (samples
        around each other domain's class prototype).
    rounds, domain_rounds : int
        Training rounds of the label-skew and the domain-skew runs (an augmentation method adds
        one statistics round).
    train : TrainConfig
        Every client's local training, counted in epochs (``steps`` is refused: the matched-steps
        controls turn its epochs into steps, :meth:`matched`).
    early : int
        The training round the convergence claim reads (``early (%)``), at most ``rounds``.
    label_classifier, domain_classifier, hidden
        The classifiers (:func:`fedlib.algorithms.ggeur.classifier_fn`).
    prox_mu, proto_lam : float
        FedProx's and FedProto's weights.
    k : int
        The top eigenvectors of the similarity.
    domain_max : int or None
        At most this many images per domain (a seeded subset; ``None``: all).
    domain_test, domain_client : float
        Each domain's test share and its client's share.
    embedding_scale : float
        Multiplies every label-skew embedding.
    encoder_sees : {"all", "mnist"}
        What the domain encoder trains on.
    eval_every : int
        Evaluate every this many rounds. Only 1 is accepted while the convergence claim reads
        round ``early`` of every curve: a method with a statistics round is evaluated one round
        later than one without, so a longer period leaves one of the two without round ``early``.
    similarity_method : {"paper", "subspace"}
        The similarity of the heat maps and the Figure 6 claims (:func:`similarity_rows`).
    clip_checkpoint : str, optional
        A local open_clip checkpoint (ViT-B-32): the encoder instead of the public-split CNN.
    options : RunOptions
        How the runs execute.
    results_dir : str, optional
        Where every run's result is saved (``None``: not saved).

    Raises
    ------
    ValueError
        A count that is not an integer >= 1, a share outside (0, 1), a negative weight, an
        ``embedding_scale`` that is not > 0, an ``early`` beyond ``rounds``, an ``eval_every``
        other than 1, a ``train`` counted in steps, an ``encoder_sees`` not in
        :data:`ENCODER_SEES` or a ``similarity_method`` not in
        :data:`fedlib.geometry.SIMILARITY_METHODS`.

    Examples
    --------
    >>> study = GGEURStudy(n_samples=200, public_fraction=0.2, encoder_epochs=1, encoder_width=8, n_clients=2,
    ...                    global_test_per_class=2, total_per_class=10, per_prototype=5, rounds=1, domain_rounds=1,
    ...                    train=TrainConfig(epochs=1, batch_size=16, optimizer="adam", lr=1e-2), early=1)
    >>> study.matched([40, 60]).steps  # ceil(50 / 16) batches, one epoch
    4
    """

    n_samples: int | None
    public_fraction: float
    encoder_epochs: int
    encoder_width: int
    n_clients: int
    global_test_per_class: int
    total_per_class: int
    per_prototype: int
    rounds: int
    domain_rounds: int
    train: TrainConfig
    early: int
    label_classifier: str = "linear"
    domain_classifier: str = "mlp"
    hidden: int = 128
    prox_mu: float = 0.01
    proto_lam: float = 2.0
    k: int = 5
    domain_max: int | None = None
    domain_public: float = 0.3
    domain_test: float = 0.2
    domain_client: float = 0.1
    embedding_scale: float = 1.0
    encoder_sees: str = "all"
    eval_every: int = 1
    similarity_method: str = "paper"
    clip_checkpoint: str | None = None
    options: RunOptions = field(default_factory=RunOptions)
    results_dir: Any = None

    def __post_init__(self) -> None:
        for name in ("encoder_epochs", "encoder_width", "n_clients", "global_test_per_class", "total_per_class",
                     "per_prototype", "rounds", "domain_rounds", "early", "hidden", "k", "eval_every"):
            check_int(name, getattr(self, name), low=1)
        if self.n_samples is not None:
            check_int("n_samples", self.n_samples, low=1)
        if self.domain_max is not None:
            check_int("domain_max", self.domain_max, low=1)
        for name in ("public_fraction", "domain_public", "domain_test", "domain_client"):
            check_real(name, getattr(self, name), low=0.0, high=1.0, low_open=True, high_open=True)
        check_real("prox_mu", self.prox_mu, low=0.0)
        check_real("proto_lam", self.proto_lam, low=0.0)
        check_real("embedding_scale", self.embedding_scale, low=0.0, low_open=True)
        if self.encoder_sees not in ENCODER_SEES:
            raise ValueError(f"encoder_sees must be 'all' or 'mnist', got {self.encoder_sees!r}")
        if self.similarity_method not in SIMILARITY_METHODS:
            raise ValueError(f"unknown similarity_method {self.similarity_method!r}; valid: {', '.join(SIMILARITY_METHODS)}")
        if self.early > self.rounds:
            raise ValueError(f"early must be a training round, 1 to rounds = {self.rounds}, got {self.early}")
        if self.eval_every != 1:
            raise ValueError(f"eval_every must be 1 (every curve is read at round early = {self.early}), got {self.eval_every}")
        if self.train.steps is not None:
            raise ValueError(f"train must count epochs, not steps (the matched-steps controls count them), "
                             f"got steps={self.train.steps}")

    # -- the pieces of a run ------------------------------------------------------------------

    def run(self, alg: Algorithm, fed: Federation, model_fn, training_rounds: int, extra_round: bool,
            seed: int) -> tuple[RunResult, pd.Series, float]:
        """One run of ``seed``: the result, its global accuracy curve indexed by *training*
        rounds (``extra_round``: the method's statistics round comes first and is not counted),
        and its seconds."""
        cfg = LoopConfig(rounds=training_rounds + int(extra_round), seed=seed, eval_every=self.eval_every)
        t0 = time.perf_counter()
        res = run_federated(alg, fed, model_fn, cfg, self.options)
        curve = res.curve("global")
        curve.index = curve.index - int(extra_round)
        return res, curve, time.perf_counter() - t0

    def matched(self, sizes: Sequence[int]) -> TrainConfig:
        """FedAvg's budget with as many local steps as GGEUR's clients take on sets of these
        sizes (:func:`fedlib.algorithms.ggeur.matched_train`): the study's ``train`` (optimizer,
        momentum, weight decay as they are) with its epochs turned into that many steps."""
        m = matched_train(sizes, self.train.batch_size, self.train.epochs, self.train.lr, self.train.optimizer)
        return dataclasses.replace(self.train, epochs=m.epochs, steps=m.steps)

    # -- label skew -----------------------------------------------------------------------------

    def label_embeddings(self, seed: int) -> LabelSetup:
        """Seed ``seed``: the data subset, the public split, the encoder trained on it (or the
        CLIP checkpoint) and the embeddings of the rest (multiplied by ``embedding_scale``)."""
        data = load_dataset("mnist5k", n_samples=self.n_samples, seed=seed)  # the smoke profile uses a seeded subset
        pub, rest = public_split(data, self.public_fraction, seed=seed)
        if self.clip_checkpoint is not None:
            enc = OpenCLIPEncoder("ViT-B-32", self.clip_checkpoint)
        else:
            enc = train_public_encoder(data.subset(pub), epochs=self.encoder_epochs, width=self.encoder_width, seed=seed)
        e = encode_dataset(enc, data.subset(rest))
        if self.embedding_scale != 1.0:
            e = ArrayDataset(self.embedding_scale * e.x, e.y, e.n_classes, e.name)
        return LabelSetup(enc, e, len(pub))

    def label_federation(self, embeddings: ArrayDataset, beta: float, seed: int) -> Federation:
        """The label-skew federation of ``embeddings`` at Dirichlet concentration ``beta``."""
        check_real("beta", beta, low=0.0, low_open=True)
        return make_federation(embeddings, n_clients=self.n_clients, partition="dirichlet", alpha=beta, min_size=10,
                               global_test_per_class=self.global_test_per_class, seed=seed)

    def label_methods(self, fed: Federation, n_classes: int, total: int) -> dict[str, tuple[Algorithm, bool]]:
        """The label-skew runs on one federation by name (:data:`LABEL_METHODS`): the algorithm
        and whether it adds a statistics round; ``total``: GGEUR's step-1 total per class."""
        check_int("total", total, low=1)
        train = self.train
        ms_cfg = self.matched([filled_size(c.train.y, n_classes, total) for c in fed.clients])
        return {
            "FedAvg": (FedAvg(train=train), False),
            "FedAvg, matched steps": (FedAvg(train=ms_cfg), False),
            "FedAvg, rebalanced": (Rebalanced(base=FedAvg(train=train), total_per_class=total), True),
            GGEUR_CODE: (GGEUR(base=FedAvg(train=train), total_per_class=total, formula="code"), True),
            GGEUR_PAPER: (GGEUR(base=FedAvg(train=train), total_per_class=total, formula="paper"), True),
            "FedMix-style": (FedMixStyle(train=train), True),
            "FedMix-style, matched steps": (FedMixStyle(train=ms_cfg), True),
            "FedFA-style": (FedFAStyle(base=FedAvg(train=train), total_per_class=total), True),
        }

    def label_names(self, beta: float, betas: Sequence[float], full: bool = True) -> list[str]:
        """The label-skew runs a seed makes at ``beta``: on a full seed every run of
        :data:`LABEL_METHODS` (those of :data:`LOW_BETA_ONLY` at the lowest of ``betas`` only), on
        a headline seed those of :data:`HEADLINE_LABEL`.

        Examples
        --------
        >>> study = GGEURStudy(n_samples=200, public_fraction=0.2, encoder_epochs=1, encoder_width=8, n_clients=2,
        ...                    global_test_per_class=2, total_per_class=10, per_prototype=5, rounds=1, domain_rounds=1,
        ...                    train=TrainConfig(epochs=1, batch_size=16, optimizer="adam", lr=1e-2), early=1)
        >>> len(study.label_names(0.5, [0.5, 0.1])), len(study.label_names(0.1, [0.5, 0.1])), study.label_names(0.5, [0.5], False)
        (7, 8, ['FedAvg', '+GGEUR (code: N(x, Σ))'])
        """
        if not full:
            return list(HEADLINE_LABEL)
        return [m for m in LABEL_METHODS if m not in LOW_BETA_ONLY or beta == min(betas)]

    def label_seed(self, seed: int, betas: Sequence[float], setup: LabelSetup | None = None, full: bool = True) -> dict:
        """Seed ``seed`` of the label-skew experiment, every concentration of ``betas``: its
        ``rows`` (of :attr:`LabelRuns.table`), its ``curves`` and its ``seconds`` of training;
        ``setup``: the frozen encoder's embeddings (``None``: this seed's own,
        :meth:`label_embeddings`); ``full``: every run, else the headline runs only (:meth:`label_names`)."""
        rows, curves, seconds = [], {}, 0.0
        enc, emb, _ = self.label_embeddings(seed) if setup is None else setup
        lin_fn = classifier_fn(self.label_classifier, enc.dim, emb.n_classes)
        for beta in betas:
            fed = self.label_federation(emb, beta, seed)
            methods = self.label_methods(fed, emb.n_classes, self.total_per_class)
            for name in self.label_names(beta, betas, full):
                alg, extra = methods[name]
                res, curve, secs = self.run(alg, fed, lin_fn, self.rounds, extra, seed)
                curves[(seed, beta, name)] = curve
                seconds += secs
                rows.append({"seed": seed, "beta": beta, "method": name, "accuracy (%)": 100 * res.summary()["global"],
                             "early (%)": 100 * float(curve.get(self.early, np.nan))})
                if self.results_dir is not None:
                    res.save(Path(self.results_dir) / f"label_seed{seed}_beta{beta}_{len(rows)}")
        return {"rows": rows, "curves": curves, "seconds": seconds}

    def run_label(self, seeds: Sequence[int], betas: Sequence[float], workers: int = 1,
                  first: LabelSetup | None = None, full: int | None = None) -> LabelRuns:
        """:meth:`label_seed` for every seed in ``workers`` processes (the same bits as one after
        another when torch runs one thread, as :func:`fedbook.parallel.map_parallel` says).

        The encoder is frozen once, like the paper's CLIP: ``first`` (the embeddings of
        ``seeds[0]``, :meth:`label_embeddings`; built here when ``None``) serves every seed, and a
        seed varies the clients' partition, the global test set and the classifier's
        initialization. The first ``full`` seeds make every run, the others the headline runs
        only (``None``: every seed makes every run)."""
        if not seeds:
            raise ValueError("seeds must hold at least one run seed, got none")
        if not betas:
            raise ValueError("betas must hold at least one concentration, got none")
        n_full = len(seeds) if full is None else check_int("full", full, low=1)
        setup = self.label_embeddings(seeds[0]) if first is None else first
        outputs = map_parallel(lambda s: self.label_seed(s, betas, setup, full=list(seeds).index(s) < n_full), seeds, workers)
        curves = {}
        for out in outputs:
            curves.update(out["curves"])
        return LabelRuns(pd.DataFrame([r for out in outputs for r in out["rows"]]), curves,
                         sum(out["seconds"] for out in outputs))

    def first_seed_label(self, embeddings: ArrayDataset, beta: float, seed: int, total: int,
                         names: Sequence[str]) -> dict[str, float]:
        """Accuracy (%) of the named label-skew runs (:data:`LABEL_METHODS`) of one seed at
        ``beta`` on ``embeddings``, with GGEUR's step-1 total ``total`` (the worked solutions'
        reduced runs)."""
        fed = self.label_federation(embeddings, beta, seed)
        methods = self.label_methods(fed, embeddings.n_classes, total)
        unknown = [n for n in names if n not in methods]
        if unknown:
            raise ValueError(f"unknown label-skew runs {unknown}; valid: {', '.join(methods)}")
        lin_fn = classifier_fn(self.label_classifier, embeddings.x.shape[1], embeddings.n_classes)
        return {name: 100 * self.run(methods[name][0], fed, lin_fn, self.rounds, methods[name][1], seed)[0].summary()["global"]
                for name in names}

    # -- domain skew ----------------------------------------------------------------------------

    def domain_data(self, seed: int) -> tuple[ArrayDataset, np.ndarray, np.ndarray]:
        """Seed ``seed``: the :data:`DOMAINS` (a seeded subset of ``domain_max`` per domain) and
        their public split, indices ``(public, rest)``."""
        d_all = make_digit_domains(DOMAINS, seed=seed)
        if self.domain_max is not None:  # the smoke profile keeps a seeded subset of every domain
            r_ = numpy_rng(seed, DATA_SUBSET)
            d_all = d_all.subset(np.sort(np.concatenate([r_.permutation(np.flatnonzero(d_all.domain.numpy() == d))[:self.domain_max]
                                                         for d in range(len(d_all.domain_names))])))
        pub, rest = public_split(d_all, self.domain_public, seed=seed)
        return d_all, pub, rest

    def domain_federation(self, seed: int, sees: str | None = None, data: tuple | None = None,
                          encoder: FrozenEncoder | None = None) -> DomainSetup:
        """Seed ``seed``: the domains, the public split, the encoder and one client per domain.

        ``sees``: what the encoder trains on (:data:`ENCODER_SEES`; ``None``: ``encoder_sees``);
        ``data``: :meth:`domain_data`'s output, if already built; ``encoder``: with a CLIP
        checkpoint, the encoder already loaded (``None``: loaded again)."""
        sees = self.encoder_sees if sees is None else sees
        if sees not in ENCODER_SEES:
            raise ValueError(f"sees must be 'all' or 'mnist', got {sees!r}")
        d_all, pub, rest = self.domain_data(seed) if data is None else data
        enc_pub = pub if sees == "all" else pub[d_all.domain.numpy()[pub] == 0]
        if self.clip_checkpoint is None:
            enc = train_public_encoder(d_all.subset(enc_pub), epochs=self.encoder_epochs, width=self.encoder_width,
                                       seed=seed)  # train_public_encoder derives its own streams
        else:
            enc = encoder if encoder is not None else OpenCLIPEncoder("ViT-B-32", self.clip_checkpoint)
        e = encode_dataset(enc, d_all.subset(rest))
        totals = {name: int((d_all.domain == d).sum()) for d, name in enumerate(d_all.domain_names)}
        fed, sizes = one_client_per_domain(e, totals, self.domain_test, self.domain_client, seed=seed)
        return DomainSetup(d_all, pub, enc, e, fed, sizes, len(enc_pub))

    def domain_runs(self, fed: Federation) -> dict[tuple[str, str], tuple[Algorithm, bool]]:
        """The domain-skew runs on one federation by ``(base, variant)`` (:data:`DOM_ORDER`):
        the algorithm and whether it adds a statistics round."""
        train = self.train
        makers = {"FedAvg": lambda: FedAvg(train=train), "FedProx": lambda: FedProx(train=train, mu=self.prox_mu),
                  "FedProto": lambda: FedProto(train=train, lam=self.proto_lam)}
        ms_cfg = self.matched([augmented_size(fed, k, self.total_per_class, self.per_prototype) for k in range(fed.n_clients)])
        runs = {}
        for bname, make in makers.items():
            runs[(bname, bname)] = (make(), False)
            if bname in ABLATION_BASES:
                runs[(bname, STEP1)] = (GGEUR(base=make(), total_per_class=self.total_per_class), True)
            runs[(bname, STEPS12)] = (GGEUR(base=make(), total_per_class=self.total_per_class, cross_domain=True,
                                            per_prototype=self.per_prototype), True)
        runs[("FedAvg", "FedAvg, matched steps")] = (FedAvg(train=ms_cfg), False)
        runs[("FedAvg", "FedMix-style")] = (FedMixStyle(train=train), True)
        runs[("FedAvg", "FedFA-style")] = (FedFAStyle(base=FedAvg(train=train), total_per_class=self.total_per_class), True)
        return runs

    def domain_row(self, alg: Algorithm, extra: bool, fed: Federation, model_fn, names: Sequence[str],
                   seed: int) -> tuple[dict[str, float], RunResult, float]:
        """One domain-skew run: its accuracy (%) per domain (client ``k`` is domain ``names[k]``),
        ``AVG`` and ``STD`` (population) over the domains, the result and its seconds."""
        res, curve, secs = self.run(alg, fed, model_fn, self.domain_rounds, extra, seed)
        per = res.per_client()["local"] * 100
        row = {names[k]: float(per.loc[k]) for k in per.index}
        row["AVG"] = float(per.mean())
        row["STD"] = float(per.std(ddof=0))
        return row, res, secs

    def domain_classifier_fn(self, setup: DomainSetup):
        """The domain-skew classifier for a seed's embeddings."""
        return classifier_fn(self.domain_classifier, setup.encoder.dim, setup.embeddings.n_classes, hidden=self.hidden)

    def domain_seed(self, seed: int, setup: DomainSetup | None = None, encoder: FrozenEncoder | None = None,
                    full: bool = True) -> dict:
        """Seed ``seed`` of the domain-skew experiment: its ``rows`` (of
        :attr:`DomainRuns.table`), its similarity ``sims`` and ``matrices`` (:func:`similarity_rows`)
        and its ``seconds``; ``setup``: the seed's federation if already built, ``encoder`` as in
        :meth:`domain_federation`; ``full``: every run of :data:`DOM_ORDER`, else those of
        :data:`HEADLINE_DOM` only."""
        rows, seconds = [], 0.0
        setup = self.domain_federation(seed, encoder=encoder) if setup is None else setup
        mlp_fn = self.domain_classifier_fn(setup)
        runs = self.domain_runs(setup.federation)
        for bname, vname in (DOM_ORDER if full else HEADLINE_DOM):
            alg, extra = runs[(bname, vname)]
            row, res, secs = self.domain_row(alg, extra, setup.federation, mlp_fn, setup.domains.domain_names, seed)
            seconds += secs
            rows.append({"seed": seed, "base": bname, "method": vname, **row})
            if self.results_dir is not None:
                res.save(Path(self.results_dir) / f"domain_seed{seed}_{bname}_{len(rows)}")
        sims, mats = similarity_rows(seed, setup.domains, setup.embeddings, self.k, self.similarity_method)
        return {"rows": rows, "sims": sims, "matrices": mats, "seconds": seconds}

    def run_domain(self, seeds: Sequence[int], workers: int = 1, first: DomainSetup | None = None,
                   full: int | None = None) -> DomainRuns:
        """:meth:`domain_seed` for every seed in ``workers`` processes; ``first``: the first
        seed's federation, if already built (with a CLIP checkpoint its encoder serves every seed).

        Unlike the label-skew runs, every seed trains its own domain encoder: Figure 6's rows are
        about the encoder, and how an encoder represents each domain is the largest source of
        spread in the domain-skew accuracies, so the rows carry it. The first ``full`` seeds make
        every run, the others the headline runs only (``None``: every seed makes every run)."""
        if not seeds:
            raise ValueError("seeds must hold at least one run seed, got none")
        seeds = list(seeds)
        n_full = len(seeds) if full is None else check_int("full", full, low=1)
        clip = first.encoder if first is not None and self.clip_checkpoint is not None else None
        outputs = map_parallel(lambda s: self.domain_seed(s, first if s == seeds[0] else None, clip,
                                                          full=seeds.index(s) < n_full), seeds, workers)
        return DomainRuns(pd.DataFrame([r for out in outputs for r in out["rows"]]),
                          pd.DataFrame([r for out in outputs for r in out["sims"]]), outputs[0]["matrices"], seeds,
                          sum(out["seconds"] for out in outputs))


__all__ = ["ABLATION_BASES", "BASES", "DIFFERENT", "HEADLINE_DOM", "HEADLINE_LABEL", "LOW_BETA_ONLY", "DOMAINS", "DOM_ORDER", "DomainRuns", "DomainSetup", "ENCODER_SEES", "GAIN_STEP2",
           "GGEURStudy", "GGEUR_CODE", "GGEUR_PAPER", "LABEL_METHODS", "LabelRuns", "LabelSetup", "ROWMAX", "SAME",
           "STEP1", "STEPS12", "VS_COPIES", "VS_STEPS", "claims_reading", "diagonal_gap",
           "encoder_column", "similarity_rows"]
