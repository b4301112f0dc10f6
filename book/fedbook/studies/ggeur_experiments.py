r"""GGEUR's experiments as studies: the label-skew and domain-skew cells on frozen embeddings, the
geometry similarity between domains, the frames the claims read, and the numbers, tables and
figures of the chapter *GGEUR: label skew and domain skew on digit embeddings*
(``notebooks/ggeur_experiments.py``).

From GGEUR (Dai, Huang, Chen et al., "Geometric Knowledge-Guided Localized Global Distribution
Alignment for Federated Learning", CVPR 2025): Section 4.2 (label skew, Tables 1-3), Section 4.3
(domain skew, Table 4 and its ablation), Section 3.2.2 (Figure 6, the similarity of class shapes
across domains) and Section 4.5 (convergence, Figure 8).

The chapter declares its experiments as :class:`fedbook.study.Study` objects whose cells are
functions of this module, bound to a :class:`GGEURStudy` (what is embedded and trained, built from
the chapter's settings by :meth:`GGEURStudy.from_settings`):

- :func:`label_cell`: one seed and Dirichlet concentration of the label-skew experiment, every run
  of :data:`LABEL_METHODS` on the frozen embeddings (the label-skew encoder is trained once, on the
  first seed's public split, :meth:`GGEURStudy.label_embeddings`, and bound to every cell); a seed
  beyond the chapter's full seeds makes the headline runs only (:data:`HEADLINE_LABEL`). The
  worked solutions of exercises 1 and 2 are label cells too (other runs, scale or total);
- :func:`domain_cell`: one seed of the domain-skew experiment, on that seed's own encoder: the runs
  of :data:`DOM_ORDER` (:data:`HEADLINE_DOM` on a headline seed), the similarity rows and heat maps
  under both similarities (:func:`similarity_rows`), the domains' sizes and a linear probe of each
  domain's frozen embeddings (:func:`probe_rows`, the regime check :data:`PROBE_THRESHOLD`).
  Exercise 3's worked solution is a domain cell with the other encoder.

:func:`chapter_frames` turns the studies' frames into the chapter's results mapping, with the
frames the claims and their regime check read (:func:`fedbook.claims.Read`): ``label``,
``label_gain``, ``domain``, ``fig6``, ``leads`` and ``probe``. The numbers the prose reads come
from :func:`label_numbers`, :func:`domain_numbers`, :func:`probe_numbers`,
:func:`embedding_summary` and the exercises' functions (:func:`exercise1`, :func:`exercise2`,
:func:`exercise3`); the sentences that depend on the data from :func:`swing_reading`,
:func:`probe_numbers`, the exercises' functions and :func:`claims_reading`.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fedbook.claims import (HOLDS, INCONCLUSIVE, OPPOSITE, RESOLUTION_SHARE, SMALLER, UNTESTABLE_RESOLUTION, UNTESTABLE_SETTING, ClaimResult,
                            says)
from fedbook.intervals import mean_interval, seed_table
from fedbook.page import show_table, sign_word
from fedlib.algorithms import GGEUR, FedAvg, FedFAStyle, FedMixStyle, FedProto, FedProx
from fedlib.algorithms.ggeur import Rebalanced, augmented_size, classifier_fn, filled_size, matched_train
from fedlib.data import ArrayDataset, load_dataset, make_digit_domains
from fedlib.encoders import ENCODER_FEATURES, FrozenEncoder, OpenCLIPEncoder, encode_dataset, public_split, train_public_encoder
from fedlib.federation import Federation, make_federation, one_client_per_domain
from fedlib.geometry import SIMILARITY_METHODS, augment, class_shapes, numerical_ranks, similarity_matrix, trace_ratio
from fedlib.loop import LoopConfig
from fedlib.results import RunResult
from fedlib.run import RunOptions
from fedlib.protocol import Algorithm
from fedlib.rng import DATA_SUBSET, LOCAL_TRAIN, numpy_rng, torch_generator
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
HEADLINE_LABEL = ("FedAvg", "FedAvg, rebalanced", GGEUR_CODE)
"""The label-skew runs of the headline claims and of the control read beside each of them (GGEUR against FedAvg on
real samples rebalanced to GGEUR's class counts): the only runs of a seed beyond the chapter's full seeds."""
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


EX3_RUNS = [("FedAvg", "FedAvg"), ("FedAvg", STEP1), ("FedAvg", STEPS12)]
"""Exercise 3's domain-skew runs: FedAvg alone and with GGEUR's steps."""
SEES_TEXT = {"all": ("the public parts of every domain", "like CLIP it has seen every domain", "encoder on every domain"),
             "mnist": ("the public part of MNIST only", "unlike CLIP it has seen one domain only", "encoder on MNIST only")}
"""Per :data:`ENCODER_SEES` value, what the prose says: what the encoder trains on, how it compares with
CLIP, and exercise 3's column name."""
SIZE_NAMES = {"domain size": "domain size (images)", "client train": "client's train set (images)",
              "domain test": "domain's test set (images)", "classes held": "classes the client holds"}
"""The columns of the domains' table (:func:`fedlib.federation.one_client_per_domain`'s sizes)."""
PROBE = "probe accuracy (%)"
"""The column of :func:`probe_rows` that the regime check reads: a domain's linear-probe test accuracy."""
ZEROS, NORM = "zero coordinates (%)", "mean norm"
"""The other columns of :func:`probe_rows`: the share of a domain's embedding coordinates that are exactly 0, and the
mean Euclidean norm of its embeddings."""
PROBE_THRESHOLD = 50.0
"""The regime check "signal in every domain", fixed before the runs: every domain's linear probe on its own frozen
embeddings (:func:`probe_rows`) must reach this accuracy (%) in every seed.

Fifty per cent is five times chance on ten classes, so a domain below it carries too little class signal for a
classifier trained on its embeddings, federated or not, to show a gain of a few points there; and it is below the
weakest domain of the paper's own setting (SVHN, 56.36 % for FedAvg with CLIP and an MLP, the paper's Table 4, a
federated model, which a probe trained on the domain's own embeddings should meet), so the paper's CLIP setting
passes it."""
PROBE_MAX_ITER = 1000
"""The iterations of the probe's L-BFGS fit (:func:`probe_rows`)."""


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


def probe_rows(federation: Federation, names: Sequence[str]) -> list[dict[str, Any]]:
    """A linear probe of each domain's frozen embeddings: does the domain carry class signal?

    Client ``k`` of ``federation`` holds domain ``names[k]`` (:func:`fedlib.federation.one_client_per_domain`):
    a multinomial logistic regression (scikit-learn's, L2 with ``C = 1``, L-BFGS for at most
    :data:`PROBE_MAX_ITER` iterations, on coordinates standardized on the train set, so that a
    domain's small scale alone does not fail it) is fitted on the client's train embeddings and
    scored on its domain's test embeddings. Deterministic, and it draws no random numbers.

    Returns
    -------
    list of dict
        Per domain: ``domain``, :data:`PROBE` (the test accuracy, %), :data:`ZEROS` and
        :data:`NORM` (over the domain's train and test embeddings).

    Examples
    --------
    >>> import torch
    >>> from fedlib.federation import ClientData
    >>> g = torch.Generator().manual_seed(0)
    >>> y = torch.arange(80) % 2
    >>> signal = ArrayDataset(torch.randn(80, 3, generator=g) + 3 * y[:, None], y, 2, "toy")
    >>> noise = ArrayDataset(torch.zeros(80, 3), y, 2, "toy")  # every embedding 0: no signal
    >>> fed = Federation([ClientData(signal.subset(range(40)), signal.subset(range(40, 80))),
    ...                   ClientData(noise.subset(range(40)), noise.subset(range(40, 80)))], signal, 2, {})
    >>> [(r["domain"], r[PROBE], r[ZEROS]) for r in probe_rows(fed, ["a", "b"])]
    [('a', 100.0, 0.0), ('b', 50.0, 100.0)]
    """
    if len(names) != federation.n_clients:
        raise ValueError(f"names must name each of the {federation.n_clients} clients' domains, got {list(names)}")
    rows = []
    for name, client in zip(names, federation.clients):
        xtr, ytr = client.train.x.double().numpy(), client.train.y.numpy()
        xte, yte = client.test.x.double().numpy(), client.test.y.numpy()
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=PROBE_MAX_ITER))
        with warnings.catch_warnings():  # a domain whose classifier does not converge is still scored as it stands
            warnings.simplefilter("ignore", ConvergenceWarning)
            probe.fit(xtr, ytr)
        both = np.concatenate([xtr, xte])
        rows.append({"domain": str(name), PROBE: 100 * float(probe.score(xte, yte)), ZEROS: 100 * float((both == 0).mean()),
                     NORM: float(np.linalg.norm(both, axis=1).mean())})
    return rows


def diagonal_gap(rows: Sequence[Mapping[str, float]]) -> float:
    """The mean over :func:`similarity_rows`'s rows of :math:`S` on the diagonal minus off it.

    Examples
    --------
    >>> diagonal_gap([{SAME: 3.0, DIFFERENT: 1.0}, {SAME: 2.0, DIFFERENT: 1.5}])
    1.25
    """
    return float(np.mean([r[SAME] - r[DIFFERENT] for r in rows]))


UNTESTABLE_WORDS = {UNTESTABLE_RESOLUTION: "the quantity cannot resolve the smallest effect of interest at this size, so the "
                                           "comparison is not read",
                    UNTESTABLE_SETTING: "a regime check of the setting fails (the claims table names it), so the comparison "
                                        "is not read"}
"""An untestable control in words (:data:`VS_COPIES`, :data:`VS_STEPS`)."""
VS_COPIES = {HOLDS: "generated samples beat copies of real samples at the same class counts",
             SMALLER: "the lead of generated samples over copies of real samples at the same class counts, if any, is smaller "
                      "than the smallest effect of interest",
             OPPOSITE: "copies of real samples at GGEUR's class counts do better",
             INCONCLUSIVE: "whether generated samples beat copies of real samples at the same class counts by the smallest "
                           "effect of interest stays open at this scale",
             **UNTESTABLE_WORDS}
"""The rebalancing-only control's outcome in words (:func:`claims_reading`), by verdict, a "does not hold" by its kind
(:attr:`fedbook.claims.ClaimResult.outcome`)."""
VS_STEPS = {HOLDS: "the lead survives giving the baseline GGEUR's local steps",
            SMALLER: "GGEUR's lead over the baseline given its local steps, if any, is smaller than the smallest effect of "
                     "interest",
            OPPOSITE: "the baseline given GGEUR's local steps does better",
            INCONCLUSIVE: "whether the lead survives giving the baseline GGEUR's local steps stays open at this scale",
            **UNTESTABLE_WORDS}
"""A matched-steps control's outcome in words (:func:`claims_reading`), by verdict, a "does not hold" by its kind
(:attr:`fedbook.claims.ClaimResult.outcome`)."""


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

    def o(key):
        return results[key].outcome

    def s(key):
        return says(results[key])

    parts = []
    b_lo = min(betas)
    for b in betas:
        parts.append(f"At β = {b}, {s(f'label-gain-{b}')}; its rebalancing-only control {s(f'ctrl-rebalanced-{b}')}: "
                     f"{VS_COPIES[o(f'ctrl-rebalanced-{b}')]}; its matched-steps control {s(f'ctrl-matched-{b}')}: "
                     f"{VS_STEPS[o(f'ctrl-matched-{b}')]}. Against every other method, {s(f'label-outperforms-{b}')}"
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
                 f"{VS_STEPS[o('ctrl-dom-matched')]}; against the two peer baselines {s('digits-vs-peers')}.")
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




@dataclass(frozen=True)
class GGEURStudy:
    """What the chapter embeds and trains for every run seed.

    Label skew (:func:`label_cell`): MNIST-5k, a public split trains the encoder, the rest is
    embedded and split over ``n_clients`` clients with a Dirichlet skew per concentration; every
    run of :data:`LABEL_METHODS` trains a linear classifier. Domain skew (:func:`domain_cell`):
    the :data:`DOMAINS`, one client per domain, every run of :data:`DOM_ORDER` trains an MLP.
    The chapter builds it from its settings (:meth:`from_settings`) and binds it to its studies'
    cells, so a cell's cache key covers every field.

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
    encoder_standardize : bool
        Every image standardized on its own pixels before the encoder, in its training and when
        embedding (:func:`fedlib.encoders.standardize_images`: an inverted digit is then the negative
        of a digit, not an image of another brightness).
    encoder_features : {"relu", "linear"}
        The encoder's embedding: its penultimate layer after the ReLU, or before it
        (:data:`fedlib.encoders.ENCODER_FEATURES`; ``"linear"`` is a linear projection's output, as
        CLIP's image embedding is, with no coordinate clamped to 0). ``"relu"`` is the book's setting:
        the ``"linear"`` embeddings are far larger in norm, and at the book's learning rate the
        federated linear classifier did not train on them in the builds that tried it (a smaller
        ``lr`` or ``embedding_scale`` may be needed); ``"relu"`` clamps coordinates to 0 and leaves the
        class covariances of low rank, so augmentation fills a subspace (the chapter measures both).
    eval_every : int
        Evaluate every this many rounds. Only 1 is accepted while the convergence claim reads
        round ``early`` of every curve: a method with a statistics round is evaluated one round
        later than one without, so a longer period leaves one of the two without round ``early``.
        The label-skew runs are evaluated so; a domain-skew run, whose curve no row reads, after
        its last round only (:meth:`run` with ``full_curve=False``).
    clip_checkpoint : str, optional
        A local open_clip checkpoint (ViT-B-32): the encoder instead of the public-split CNN.
    options : RunOptions
        How the runs execute.

    Raises
    ------
    ValueError
        A count that is not an integer >= 1, a share outside (0, 1), a negative weight, an
        ``embedding_scale`` that is not > 0, an ``early`` beyond ``rounds``, an ``eval_every``
        other than 1, a ``train`` counted in steps or an ``encoder_sees`` not in
        :data:`ENCODER_SEES`.

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
    encoder_standardize: bool = False
    encoder_features: str = "relu"
    eval_every: int = 1
    clip_checkpoint: str | None = None
    options: RunOptions = field(default_factory=RunOptions)

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
        if self.encoder_features not in ENCODER_FEATURES:
            raise ValueError(f"unknown encoder_features {self.encoder_features!r}; valid: {', '.join(ENCODER_FEATURES)}")
        if not isinstance(self.encoder_standardize, bool):
            raise ValueError(f"encoder_standardize must be True or False, got {self.encoder_standardize!r}")
        if self.early > self.rounds:
            raise ValueError(f"early must be a training round, 1 to rounds = {self.rounds}, got {self.early}")
        if self.eval_every != 1:
            raise ValueError(f"eval_every must be 1 (every curve is read at round early = {self.early}), got {self.eval_every}")
        if self.train.steps is not None:
            raise ValueError(f"train must count epochs, not steps (the matched-steps controls count them), "
                             f"got steps={self.train.steps}")

    @classmethod
    def from_settings(cls, P: Any, *, options: RunOptions | None = None, clip_checkpoint: str | None = None) -> GGEURStudy:
        """The study of a chapter's settings ``P`` (:func:`fedbook.page.setup`'s): its sizes, Adam
        with ``P.lr`` for ``P.local_epochs`` local epochs in batches of ``P.batch_size``, and
        ``early`` at a fifth of ``P.rounds`` (at least 1). ``P.similarity`` is checked here too
        (it selects the chapter's similarity, :func:`chapter_frames`), before any run.

        Raises
        ------
        ValueError
            On a ``P.similarity`` not in :data:`fedlib.geometry.SIMILARITY_METHODS`, and as the
            constructor does.
        """
        if P.similarity not in SIMILARITY_METHODS:
            raise ValueError(f"unknown similarity {P.similarity!r}; valid: {', '.join(SIMILARITY_METHODS)}")
        train = TrainConfig(epochs=P.local_epochs, batch_size=P.batch_size, optimizer="adam", lr=P.lr)
        names = ("n_samples", "public_fraction", "encoder_epochs", "encoder_width", "n_clients", "global_test_per_class",
                 "total_per_class", "per_prototype", "rounds", "domain_rounds", "label_classifier", "domain_classifier",
                 "hidden", "prox_mu", "proto_lam", "k", "domain_max", "domain_public", "domain_test", "domain_client",
                 "embedding_scale", "encoder_sees", "encoder_standardize", "encoder_features", "eval_every")
        return cls(**{n: getattr(P, n) for n in names}, train=train, early=max(1, P.rounds // 5),
                   clip_checkpoint=clip_checkpoint, options=RunOptions() if options is None else options)

    # -- the pieces of a run ------------------------------------------------------------------

    def run(self, alg: Algorithm, fed: Federation, model_fn, training_rounds: int, extra_round: bool,
            seed: int, *, full_curve: bool = True) -> tuple[RunResult, pd.Series, float]:
        """One run of ``seed``: the result, its global accuracy curve indexed by *training*
        rounds (``extra_round``: the method's statistics round comes first and is not counted),
        and its seconds. ``full_curve=False`` evaluates after the last round only (the curve is that
        one point): what a run whose curve nobody reads needs (evaluation draws no random number,
        so the training and the last round's numbers are the same bits)."""
        cfg = LoopConfig(rounds=training_rounds + int(extra_round), seed=seed, eval_every=self.eval_every if full_curve else 0)
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
            enc = train_public_encoder(data.subset(pub), epochs=self.encoder_epochs, width=self.encoder_width, seed=seed,
                                       standardize=self.encoder_standardize, features=self.encoder_features)
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

    def label_names(self, beta: float, low_beta: float, full: bool = True) -> list[str]:
        """The label-skew runs a seed makes at ``beta``: on a full seed every run of
        :data:`LABEL_METHODS` (those of :data:`LOW_BETA_ONLY` at the lowest concentration
        ``low_beta`` only), on a headline seed those of :data:`HEADLINE_LABEL`.

        Examples
        --------
        >>> study = GGEURStudy(n_samples=200, public_fraction=0.2, encoder_epochs=1, encoder_width=8, n_clients=2,
        ...                    global_test_per_class=2, total_per_class=10, per_prototype=5, rounds=1, domain_rounds=1,
        ...                    train=TrainConfig(epochs=1, batch_size=16, optimizer="adam", lr=1e-2), early=1)
        >>> len(study.label_names(0.5, 0.1)), len(study.label_names(0.1, 0.1)), study.label_names(0.5, 0.5, False)
        (7, 8, ['FedAvg', 'FedAvg, rebalanced', '+GGEUR (code: N(x, Σ))'])
        """
        if not full:
            return list(HEADLINE_LABEL)
        return [m for m in LABEL_METHODS if m not in LOW_BETA_ONLY or beta == low_beta]

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


    def domain_federation(self, seed: int, sees: str | None = None) -> DomainSetup:
        """Seed ``seed``: the domains, the public split, the encoder and one client per domain.

        ``sees``: what the encoder trains on (:data:`ENCODER_SEES`; ``None``: ``encoder_sees``);
        with a CLIP checkpoint, the checkpoint's encoder instead."""
        sees = self.encoder_sees if sees is None else sees
        if sees not in ENCODER_SEES:
            raise ValueError(f"sees must be 'all' or 'mnist', got {sees!r}")
        d_all, pub, rest = self.domain_data(seed)
        enc_pub = pub if sees == "all" else pub[d_all.domain.numpy()[pub] == 0]
        if self.clip_checkpoint is None:
            enc = train_public_encoder(d_all.subset(enc_pub), epochs=self.encoder_epochs, width=self.encoder_width,
                                       seed=seed, standardize=self.encoder_standardize,
                                       features=self.encoder_features)  # train_public_encoder derives its own streams
        else:
            enc = OpenCLIPEncoder("ViT-B-32", self.clip_checkpoint)
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
        ``AVG`` and ``STD`` (population) over the domains, the result (evaluated after its last
        round only: no domain-skew row reads a curve) and its seconds."""
        res, _, secs = self.run(alg, fed, model_fn, self.domain_rounds, extra, seed, full_curve=False)
        per = res.per_client()["local"] * 100
        row = {names[k]: float(per.loc[k]) for k in per.index}
        row["AVG"] = float(per.mean())
        row["STD"] = float(per.std(ddof=0))
        return row, res, secs

    def domain_classifier_fn(self, setup: DomainSetup):
        """The domain-skew classifier for a seed's embeddings."""
        return classifier_fn(self.domain_classifier, setup.encoder.dim, setup.embeddings.n_classes, hidden=self.hidden)



# ------------------------------------------------------------------------------------------------
# The cells of the chapter's studies
# ------------------------------------------------------------------------------------------------


def curve_drops(curve: pd.Series) -> float:
    r"""The drops of a global-accuracy curve (a fraction per evaluated round): the sum over training
    rounds :math:`t \ge 1` of :math:`\max(0, a_t - a_{t+1})`, in points (0 for a curve that never
    falls; the statistics round 0 of an augmentation method is not read).

    Examples
    --------
    >>> round(curve_drops(pd.Series([0.1, 0.5, 0.4, 0.6, 0.55], index=[0, 1, 2, 3, 4])), 6)  # 50 -> 40 and 60 -> 55
    15.0
    """
    a = 100 * curve
    a = a[a.index >= 1].to_numpy(dtype=float)
    return float(np.clip(a[:-1] - a[1:], 0.0, None).sum())


def label_cell(seed: int, beta: float, *, study: GGEURStudy, embeddings: ArrayDataset,
               methods: Sequence[str] | None = None, full_seeds: Sequence[int] | None = None,
               low_beta: float | None = None, total: int | None = None, scale: float = 1.0,
               results_dir: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """One cell of a label-skew study: seed ``seed``'s federation of ``embeddings`` at Dirichlet
    concentration ``beta`` (:meth:`GGEURStudy.label_federation`) and its runs, each a linear
    classifier trained for the study's ``rounds`` (an augmentation method adds its statistics round).

    Parameters
    ----------
    seed : int
        The run seed: the clients' partition, the global test set, the classifier's initialization.
    beta : float
        The Dirichlet concentration.
    study : GGEURStudy
    embeddings : ArrayDataset
        The frozen encoder's embeddings (:meth:`GGEURStudy.label_embeddings` of the first seed),
        the same for every seed: bound to the cell, so computed once.
    methods : sequence of str, optional
        The runs, names of :data:`LABEL_METHODS`, in order. ``None``: the chapter's
        (:meth:`GGEURStudy.label_names`): every run on a seed of ``full_seeds``, those of
        :data:`HEADLINE_LABEL` on another, the runs of :data:`LOW_BETA_ONLY` at ``low_beta`` only.
    full_seeds : sequence of int, optional
        The seeds that make every run (``None``: every seed).
    low_beta : float, optional
        The chapter's lowest concentration (``None``: ``beta``).
    total : int, optional
        GGEUR's step-1 total per class (``None``: the study's ``total_per_class``; exercise 2).
    scale : float, default 1
        Multiplies the embeddings (exercise 1).
    results_dir : path, optional
        Where each run's result is saved (``None``: not saved).

    Returns
    -------
    dict of str to DataFrame
        ``label``: one row per run, ``method``, ``accuracy (%)`` (global, at the end),
        ``early (%)`` (after the study's ``early`` training rounds), ``drops``
        (:func:`curve_drops`), ``full`` (whether the seed makes every run) and ``seconds``;
        ``label_curves``: one row per run and evaluated training round (0: an augmentation
        method's statistics round), ``method``, ``round``, ``accuracy`` (a fraction).

    Raises
    ------
    ValueError
        On a name of ``methods`` that is not a label-skew run.
    """
    emb = embeddings if scale == 1.0 else ArrayDataset(scale * embeddings.x, embeddings.y, embeddings.n_classes,
                                                       embeddings.name)
    full = full_seeds is None or seed in full_seeds
    names = list(methods) if methods is not None else study.label_names(beta, beta if low_beta is None else low_beta, full)
    fed = study.label_federation(emb, beta, seed)
    made = study.label_methods(fed, emb.n_classes, study.total_per_class if total is None else total)
    unknown = [n for n in names if n not in made]
    if unknown:
        raise ValueError(f"unknown label-skew runs {unknown}; valid: {', '.join(made)}")
    lin_fn = classifier_fn(study.label_classifier, emb.x.shape[1], emb.n_classes)
    rows, curves = [], []
    for name in names:
        alg, extra = made[name]
        res, curve, secs = study.run(alg, fed, lin_fn, study.rounds, extra, seed)
        rows.append({"method": name, "accuracy (%)": 100 * res.summary()["global"],
                     "early (%)": 100 * float(curve.get(study.early, np.nan)), "drops": curve_drops(curve), "full": full,
                     "seconds": secs})
        curves += [{"method": name, "round": int(r), "accuracy": float(a)} for r, a in curve.items()]
        if results_dir is not None:
            res.save(Path(results_dir) / f"label_seed{seed}_beta{beta}_{len(rows)}")
    return {"label": pd.DataFrame(rows), "label_curves": pd.DataFrame(curves)}


def domain_cell(seed: int, *, study: GGEURStudy, runs: Sequence[tuple[str, str]] | None = None,
                full_seeds: Sequence[int] | None = None, sees: str | None = None,
                results_dir: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """One cell of a domain-skew study: seed ``seed``'s domains, public split, encoder and one
    client per domain (:meth:`GGEURStudy.domain_federation`; unlike the label-skew encoder, every
    seed trains its own: Figure 6's rows are about the encoder, and how an encoder represents each
    domain is the largest source of spread in the domain-skew accuracies), its runs and the
    similarity of its class shapes across domains.

    Parameters
    ----------
    seed : int
    study : GGEURStudy
    runs : sequence of (str, str), optional
        The ``(base, variant)`` runs of :data:`DOM_ORDER` to make. ``None``: every one on a seed of
        ``full_seeds``, those of :data:`HEADLINE_DOM` on another.
    full_seeds : sequence of int, optional
        The seeds that make every run (``None``: every seed).
    sees : {"all", "mnist"}, optional
        What the encoder trains on (``None``: the study's ``encoder_sees``; exercise 3).
    results_dir : path, optional
        Where each run's result is saved (``None``: not saved). A run is evaluated after its last
        round only (``GGEURStudy.domain_row``), so its saved result holds that round's
        evaluation, not a curve.

    Returns
    -------
    dict of str to DataFrame
        ``domain``: one row per run, ``base``, ``method``, the accuracy (%) on each domain's test
        set, ``AVG`` and ``STD`` (population, points) over the domains, ``full`` and ``seconds``;
        ``similarity``: :func:`similarity_rows` under each similarity of
        :data:`fedlib.geometry.SIMILARITY_METHODS` (column ``similarity``); ``heatmaps``: every
        entry (``row``, ``column``, ``S``) of each similarity matrix; ``domain_sizes``: per domain,
        the sizes of :func:`fedlib.federation.one_client_per_domain`; ``domain_encoder``: one row,
        the ``public images`` the encoder trained on, the ``classes`` and the ``embedding dimension``;
        ``probe``: per domain, the linear probe of its frozen embeddings (:func:`probe_rows`, made
        after the runs, which it leaves unchanged).

    Raises
    ------
    ValueError
        On a run of ``runs`` that is not a domain-skew run, and as :meth:`GGEURStudy.domain_federation` does.
    """
    setup = study.domain_federation(seed, sees=sees)
    full = full_seeds is None or seed in full_seeds
    pairs = [tuple(p) for p in runs] if runs is not None else (DOM_ORDER if full else HEADLINE_DOM)
    made = study.domain_runs(setup.federation)
    unknown = [p for p in pairs if p not in made]
    if unknown:
        raise ValueError(f"unknown domain-skew runs {unknown}; valid: {DOM_ORDER}")
    mlp_fn = study.domain_classifier_fn(setup)
    rows = []
    for bname, vname in pairs:
        alg, extra = made[(bname, vname)]
        row, res, secs = study.domain_row(alg, extra, setup.federation, mlp_fn, setup.domains.domain_names, seed)
        rows.append({"base": bname, "method": vname, **row, "full": full, "seconds": secs})
        if results_dir is not None:
            res.save(Path(results_dir) / f"domain_seed{seed}_{bname}_{len(rows)}")
    sims, maps = [], []
    for method in SIMILARITY_METHODS:
        found, matrices = similarity_rows(seed, setup.domains, setup.embeddings, study.k, method)
        sims += [{"similarity": method, **{k: v for k, v in r.items() if k != "seed"}} for r in found]
        maps += [{"similarity": method, "other domain": other, "row": i, "column": j, "S": float(S[i, j])}
                 for other, S in matrices.items() for i in range(S.shape[0]) for j in range(S.shape[1])]
    return {"domain": pd.DataFrame(rows), "similarity": pd.DataFrame(sims), "heatmaps": pd.DataFrame(maps),
            "domain_sizes": pd.DataFrame([{"domain": name, **s} for name, s in setup.sizes.items()]),
            "domain_encoder": pd.DataFrame([{"public images": setup.n_public, "classes": setup.embeddings.n_classes,
                                             "embedding dimension": setup.encoder.dim}]),
            "probe": pd.DataFrame(probe_rows(setup.federation, setup.domains.domain_names))}


# ------------------------------------------------------------------------------------------------
# The chapter's results: the frames its claims, tables and prose read
# ------------------------------------------------------------------------------------------------


def chapter_frames(label: Mapping[str, pd.DataFrame], domain: Mapping[str, pd.DataFrame],
                   similarity: str = "paper", k: int | None = None) -> dict[str, pd.DataFrame]:
    """The chapter's results mapping, from the frames of its label-skew study (:func:`label_cell`)
    and its domain-skew study (:func:`domain_cell`): every frame of both, the similarity rows and
    heat maps under the chapter's ``similarity`` only (without their ``similarity`` column), and
    the frames the claims read besides ``label`` and ``domain``:

    - ``label_gain``: per concentration and seed (the seeds that made both runs, in order), the
      global accuracy of :data:`GGEUR_CODE` minus FedAvg's (``gain``, points);
    - ``fig6``: per seed, ``zero`` (0.0: the side each heat map's diagonal lead is compared with,
      so that ours − baseline is the lead) and ``rowmax share (%)`` (the share of the first
      domain's classes whose most similar class of another domain is the same class, over every
      other domain);
    - ``leads``: per seed and other domain (``other``), ``lead`` (mean :math:`S` on the diagonal
      minus off it: one heat map's diagonal lead), ``minus lead``, ``rowmax share (%)`` (that heat
      map's share of rows whose maximum is on the diagonal) and ``minus rowmax excess`` (minus that
      share's excess over chance, one class in ``classes``), so that a row read against ``zero``
      decides each heat map; with ``k`` (the eigenvectors :math:`S` sums over) also ``lead per
      cosine`` and ``minus lead per cosine``, the lead divided by ``k``: :math:`S/k` is a mean
      absolute cosine, on the unit scale of the ``correlation`` kind of :func:`fedbook.claims.effect`;
    - ``probe`` (when the domain-skew frames have it): :func:`probe_rows` per seed and domain,
      indexed by ``(seed, domain)``, so that a regime check reads every domain of every seed as
      one unit each (``Read("probe", PROBE)``).

    Raises
    ------
    ValueError
        On a ``similarity`` not in :data:`fedlib.geometry.SIMILARITY_METHODS`, or label-skew
        frames where GGEUR and FedAvg were not made on the same seeds.

    Examples
    --------
    >>> label = pd.DataFrame({"beta": [0.1] * 4, "seed": [0, 0, 1, 1], "method": ["FedAvg", GGEUR_CODE] * 2,
    ...                       "accuracy (%)": [50.0, 52.5, 40.0, 41.0]})
    >>> sims = pd.DataFrame({"seed": [0, 0], "similarity": ["paper", "subspace"], "other domain": ["uci", "uci"],
    ...                      SAME: [2.0, 4.0], DIFFERENT: [1.5, 1.0], ROWMAX: [3.0, 9.0]})
    >>> encoder = pd.DataFrame({"seed": [0], "public images": [10], "classes": [10], "embedding dimension": [8]})
    >>> F = chapter_frames({"label": label}, {"similarity": sims, "heatmaps": sims.iloc[:0], "domain_encoder": encoder})
    >>> F["label_gain"]["gain"].tolist(), F["leads"]["lead"].tolist(), F["fig6"]["rowmax share (%)"].tolist()
    ([2.5, 1.0], [0.5], [30.0])
    >>> F["leads"]["minus rowmax excess"].tolist()  # 30 % against 10 % by chance
    [-20.0]
    >>> chapter_frames({"label": label}, {"similarity": sims, "heatmaps": sims.iloc[:0], "domain_encoder": encoder},
    ...                k=5)["leads"]["lead per cosine"].tolist()  # a lead of 0.5 in S, summed over 5 cosines
    [0.1]
    """
    if similarity not in SIMILARITY_METHODS:
        raise ValueError(f"unknown similarity {similarity!r}; valid: {', '.join(SIMILARITY_METHODS)}")
    out = {**label, **domain}
    for name in ("similarity", "heatmaps"):
        f = domain[name]
        out[name] = f[f["similarity"] == similarity].drop(columns="similarity").reset_index(drop=True)
    lab, gains = label["label"], []
    for beta in dict.fromkeys(lab["beta"]):
        g = lab[(lab.beta == beta) & (lab.method == GGEUR_CODE)]
        f = lab[(lab.beta == beta) & (lab.method == "FedAvg")]
        if g["seed"].tolist() != f["seed"].tolist():
            raise ValueError(f"at beta = {beta}, GGEUR ran on seeds {g['seed'].tolist()} and FedAvg on {f['seed'].tolist()}")
        gains.append(pd.DataFrame({"beta": beta, "seed": g["seed"].to_numpy(),
                                   "gain": g["accuracy (%)"].to_numpy() - f["accuracy (%)"].to_numpy()}))
    out["label_gain"] = pd.concat(gains, ignore_index=True)
    sim = out["similarity"]
    seeds = list(dict.fromkeys(sim["seed"]))
    n_classes = int(domain["domain_encoder"]["classes"].iloc[0])
    share = (sim.groupby("seed")[ROWMAX].sum().reindex(seeds) / (n_classes * sim["other domain"].nunique())).to_numpy()
    out["fig6"] = pd.DataFrame({"seed": seeds, "zero": np.zeros(len(seeds)), "rowmax share (%)": 100 * share})
    lead = (sim[SAME] - sim[DIFFERENT]).to_numpy()
    own_share = 100 * sim[ROWMAX].to_numpy(dtype=float) / n_classes
    out["leads"] = pd.DataFrame({"seed": sim["seed"].to_numpy(), "other": sim["other domain"].to_numpy(), "lead": lead,
                                 "minus lead": -lead, "rowmax share (%)": own_share,
                                 "minus rowmax excess": -(own_share - 100 / n_classes)})
    if k is not None:
        check_int("k", k, low=1)
        out["leads"]["lead per cosine"] = lead / k
        out["leads"]["minus lead per cosine"] = -lead / k
    if "probe" in domain:
        out["probe"] = domain["probe"].set_index(["seed", "domain"])
    return out


def substitutions(P: Any, paper: Mapping[str, Any]) -> dict[str, str]:
    """What our scale substitutes, as the claims declare it (their ``substitution``), from the
    chapter's settings ``P`` and the authors' sizes (``paper``: the ``paper`` profile):
    ``label`` (every label-skew row), ``dom`` (every domain-skew row), ``steps`` (the advantage a
    GGEUR client has by construction), ``moon`` (FedProx for MOON) and ``fig6`` (Figure 6's rows,
    which depend on what the domain encoder sees)."""
    enc = (f"CLIP (ViT-B/16 in the paper's text, ViT-B/32 in the authors' code; the clip_checkpoint option loads ViT-B-32) "
           f"→ small CNN encoder trained on a {100 * P.public_fraction:.0f} % public split of MNIST-5k "
           f"({P.encoder_epochs} epochs{encoder_words(P)}), frozen, the same for every seed")
    formula = "GGEUR = the authors' code formula N(x, Σ), fixed before the runs; the paper's text formula is in the results table"
    return {
        "label": (f"{enc}; CIFAR-100 / Tiny-ImageNet → MNIST-5k embeddings; {P.total_per_class} instead of "
                  f"{paper['total_per_class']} samples per class; {P.rounds} rounds × {P.local_epochs} local epoch(s) instead of "
                  f"{paper['rounds']} × {paper['local_epochs']}; linear classifier; {formula}"),
        "dom": (f"Digits (MNIST, USPS, SVHN, SYN) → MNIST, UCI digits, rotated and inverted MNIST; CLIP → small CNN trained on "
                f"the public {100 * P.domain_public:.0f} % of "
                + ("every domain" if P.encoder_sees == "all" else "MNIST only")
                + f"{encoder_words(P)}, one trained per seed; {P.total_per_class} samples per class and {P.per_prototype} per prototype instead of "
                f"{paper['total_per_class']} per class; {P.domain_rounds} rounds × {P.local_epochs} local epoch(s) instead of "
                f"{paper['domain_rounds']}; {formula}"),
        "steps": ("by construction a GGEUR client takes more local steps per round on a class-balanced set "
                  "(the matched-steps and rebalancing controls read the claim without that advantage)"),
        "moon": "MOON is not implemented: FedProx stands in for it (a regularized base); ",
        "fig6": ("CLIP → our CNN encoder, one trained per seed; USPS, SVHN, SYN → UCI digits, rotated and inverted MNIST. Two "
                 "of the three heat maps compare MNIST with transforms of MNIST's own images (rotated, inverted), "
                 + ("and the encoder trains on every domain's public part, so a shared class shape there is nearly "
                    "guaranteed by the design; " if P.encoder_sees == "all" else
                    "so a shared class shape there is close to built in even with an encoder trained on MNIST only; ")
                 + "only the UCI-digits heat map compares two separately collected digit sets: its two rows are the "
                 "claims, the other two heat maps' rows are controls"),
    }


def encoder_words(P: Any) -> str:
    """How the public-split encoder reads an image, in words for the substitutions (empty for the plain CNN).

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> encoder_words(SimpleNamespace(encoder_standardize=True, encoder_features="linear"))
    '; inputs standardized per image, the embedding taken before the last ReLU'
    """
    words = (["inputs standardized per image"] if P.encoder_standardize else []) + (
        ["the embedding taken before the last ReLU"] if P.encoder_features == "linear" else [])
    return "".join("; " + w if i == 0 else ", " + w for i, w in enumerate(words))


def of_seed(label: pd.DataFrame, seed: int, beta: float, method: str) -> float:
    """One seed's global accuracy (%) of the label-skew run ``method`` at ``beta``.

    Raises
    ------
    ValueError
        When the frame has no such run.

    Examples
    --------
    >>> of_seed(pd.DataFrame({"seed": [0, 1], "beta": [0.1, 0.1], "method": ["FedAvg"] * 2, "accuracy (%)": [50.0, 40.0]}),
    ...         1, 0.1, "FedAvg")
    40.0
    """
    rows = label[(label.seed == seed) & (label.beta == beta) & (label.method == method)]
    if len(rows) != 1:
        raise ValueError(f"no label-skew run {method!r} at beta = {beta!r} on seed {seed!r}")
    return float(rows["accuracy (%)"].iloc[0])


def setting_numbers(P: Any, paper: Mapping[str, Any], early: int) -> dict[str, Any]:
    """The settings the prose republishes: the seeds, the level, the sizes of both experiments,
    the authors' (``paper``: the ``paper`` profile), the concentrations' ends ``b_lo`` and
    ``b_hi``, the ``early`` round and what the domain encoder sees (:data:`SEES_TEXT`)."""
    sees, like_clip, _ = SEES_TEXT[P.encoder_sees]
    return {"n_seeds": P.n_seeds, "n_headline_seeds": P.headline_seeds, "level_pct": 100 * P.level,
            "early_round": int(early), "public_pct": 100 * P.public_fraction, "enc_epochs": P.encoder_epochs,
            "n_clients": P.n_clients, "batch": P.batch_size, "lr": P.lr, "local_epochs": P.local_epochs, "rounds": P.rounds,
            "total": P.total_per_class, "paper_total": paper["total_per_class"], "paper_rounds": paper["rounds"],
            "paper_epochs": paper["local_epochs"], "paper_lr": paper["lr"], "b_lo": min(P.betas), "b_hi": max(P.betas),
            "dom_public_pct": 100 * P.domain_public, "dom_test_pct": 100 * P.domain_test,
            "dom_client_pct": 100 * P.domain_client, "dom_enc_sees": sees, "dom_enc_like_clip": like_clip,
            "hidden": P.hidden, "k": P.k}


def embedding_summary(setup: LabelSetup, seconds: float):
    """The label-skew embedding space: the table (encoder, dimension, public and embedded images,
    mean norm, share of coordinates exactly 0, mean rank of a class covariance, median
    :math:`\\mathrm{tr}(\\Sigma^2)/\\mathrm{tr}(\\Sigma)`, ``seconds`` to train and embed) and the numbers
    ``n_public``, ``emb_dim``, ``emb_rank``, ``emb_zeros`` (%), ``emb_ratio`` and ``emb_rank_reading`` (what the rank
    leaves augmentation, in words)."""
    encoder, emb, n_public = setup
    shapes = class_shapes(ClassMoments.from_features(emb.x, emb.y, emb.n_classes))
    ranks = numerical_ranks(shapes.eigenvalues).double()
    ratio = trace_ratio(shapes.eigenvalues)  # tr(Σ²)/tr(Σ) per class
    table = pd.Series({
        "encoder": encoder.name, "embedding dimension": encoder.dim, "public images": n_public, "embedded images": len(emb),
        "mean norm of an embedding": float(emb.x.norm(dim=1).mean()),
        "coordinates exactly 0 (%)": 100 * float((emb.x == 0).double().mean()), "mean rank of a class covariance": float(ranks.mean()),
        "tr(Σ²)/tr(Σ), median over classes": float(ratio.median()), "seconds (train + embed)": seconds,
    }, name="value").rename_axis("property").to_frame()
    return show_table(table), {"n_public": n_public, "emb_dim": encoder.dim, "emb_rank": float(ranks.mean()),
                               "emb_zeros": 100 * float((emb.x == 0).double().mean()), "emb_ratio": float(ratio.median()),
                               "emb_rank_reading": rank_reading(ranks, encoder.dim)}


def rank_reading(ranks: Any, dim: int) -> str:
    """What the class covariances' numerical ranks ``ranks`` (shape ``(C,)``, a tensor or an array)
    leave GGEUR's augmentation in ``dim`` dimensions, in words: full rank only if **every** class is
    of rank ``dim`` (a single class one rank short fills a subspace, not every direction).

    >>> rank_reading(np.array([4., 4.]), 4)
    'every class covariance is of full rank, so augmentation can move samples in every direction'
    >>> print(rank_reading(np.array([4., 3.]), 4))
    1 of 2 class covariances is below full rank (the lowest has rank 3 of 4), so augmentation moves such a class's samples only within the subspace its covariance spans (3.5 of 4 dimensions on average over the classes), not in every direction
    """
    ranks = np.asarray(ranks, dtype=float).reshape(-1)
    if not len(ranks) or dim < 1:
        raise ValueError(f"rank_reading needs at least one class rank and dim >= 1, got {len(ranks)} ranks and dim = {dim!r}")
    short = int((ranks != dim).sum())
    if not short:
        return "every class covariance is of full rank, so augmentation can move samples in every direction"
    verb = "is" if short == 1 else "are"
    return (f"{short} of {len(ranks)} class covariances {verb} below full rank (the lowest has rank {ranks.min():.0f} of "
            f"{dim}), so augmentation moves such a class's samples only within the subspace its covariance spans "
            f"({ranks.mean():.1f} of {dim} dimensions on average over the classes), not in every direction")


def rowmax_testability(n_classes: int, m: float) -> dict[str, Any]:
    """Whether a share of ``n_classes`` classes (resolution one class, ``100 / n_classes`` points)
    can decide a row whose smallest effect of interest is ``m`` points, by the book's rule
    (:data:`fedbook.claims.RESOLUTION_SHARE`: the resolution at most a quarter of ``m``): the numbers
    ``rowmax_res`` (points), ``rowmax_classes_needed`` (the fewest classes that would make it
    testable) and the sentence ``rowmax_testable`` (for Figure 6's row-maximum reading).

    >>> r = rowmax_testability(10, 1.0)
    >>> r["rowmax_res"], r["rowmax_classes_needed"]
    (10.0, 400)
    >>> rowmax_testability(500, 1.0)["rowmax_testable"]
    'so one class is at most a quarter of m and the row can be decided'
    """
    check_int("n_classes", n_classes, low=1)
    check_real("m", m, low=0, low_open=True)
    res = 100 / n_classes
    needed = int(np.ceil(100 / (RESOLUTION_SHARE * m) - 1e-9))
    if res <= RESOLUTION_SHARE * m:
        words = "so one class is at most a quarter of m and the row can be decided"
    else:
        words = ("so one class is more than a quarter of m and the row is untestable at this resolution whatever the "
                 "seeds show: it could be decided only with more classes, or with a finer quantity than a share of "
                 "classes (such as each row's margin, the same class's S / k minus the largest other class's, in "
                 "cosine units)")
    return {"rowmax_res": res, "rowmax_classes_needed": needed, "rowmax_testable": words}


def label_table(label: pd.DataFrame, betas: Sequence[float]):
    """The label-skew results over the full seeds: per run (rows, :data:`LABEL_METHODS`) and
    concentration (columns), the mean accuracy ± the half-width of its interval
    (:func:`fedbook.intervals.seed_table`), a dash where a run was not made, the best in bold."""
    full = label[label.full]
    table = pd.concat([seed_table(full[full.beta == b], "method", None, "accuracy (%)", bounds=(0, 100)).rename(columns=lambda _: b)
                       for b in betas], axis=1).reindex(index=list(LABEL_METHODS), columns=list(betas)).fillna("—")
    table.columns = [f"accuracy (%), β = {b}" for b in betas]
    return show_table(table, best={c: "max" for c in table.columns})


def label_numbers(label: pd.DataFrame, b_lo: float, b_hi: float) -> dict[str, float]:
    """The label-skew numbers of the prose, means over the full seeds: each run's accuracy at
    ``b_lo`` (``acc_<run>_lo``), GGEUR's gain over FedAvg at ``b_lo`` and ``b_hi``, the gains over
    FedAvg of the other augmentations and of the paper's formula, GGEUR over the rebalancing
    control, and the accuracies after the early rounds (``early_<run>``)."""
    full = label[label.full]

    def mean(beta: float, method: str, column: str = "accuracy (%)") -> float:
        rows = full[(full.beta == beta) & (full.method == method)]
        if not len(rows):
            raise ValueError(f"no label-skew run {method!r} at beta = {beta!r} on the full seeds")
        return float(rows[column].mean())

    runs = {"fedavg": "FedAvg", "ggeur": GGEUR_CODE, "paper": GGEUR_PAPER, "ms": "FedAvg, matched steps",
            "rb": "FedAvg, rebalanced", "fedmix": "FedMix-style", "fedfa": "FedFA-style"}
    out = {f"acc_{key}_lo": mean(b_lo, m) for key, m in runs.items()}
    out.update(gain_lo=mean(b_lo, GGEUR_CODE) - mean(b_lo, "FedAvg"), gain_hi=mean(b_hi, GGEUR_CODE) - mean(b_hi, "FedAvg"),
               gain_rb_lo=mean(b_lo, GGEUR_CODE) - mean(b_lo, "FedAvg, rebalanced"),
               gain_paper_lo=mean(b_lo, GGEUR_PAPER) - mean(b_lo, "FedAvg"),
               rb_gain_lo=mean(b_lo, "FedAvg, rebalanced") - mean(b_lo, "FedAvg"),
               fa_gain_lo=mean(b_lo, "FedFA-style") - mean(b_lo, "FedAvg"))
    out.update({f"early_{key}": mean(b_lo, runs[key], "early (%)") for key in ("fedavg", "ggeur", "ms")})
    return out


def plot_label_curves(curves: pd.DataFrame, betas: Sequence[float], seeds: Sequence[int], level: float = 0.95):
    """The chapter's figure of the label-skew curves: one panel per concentration of ``betas``,
    the global accuracy (%) per training round of six runs (the controls dashed), the mean over
    ``seeds`` and its interval at ``level`` as a band (clipped to 0-100 %), the legend below.
    Returns the figure."""
    n_panels = len(betas)
    fig, axes = plt.subplots(1, n_panels, figsize=(min(10.0, 3.6 * n_panels), 3.6), squeeze=False, sharey=True)
    shown = ["FedAvg", "FedAvg, matched steps", "FedAvg, rebalanced", GGEUR_CODE, "FedMix-style", "FedFA-style"]
    curves = curves[curves.seed.isin(seeds)]
    for ax, beta in zip(axes[0], betas):
        for name in shown:
            run = curves[(curves.beta == beta) & (curves.method == name)]
            c = 100 * run.pivot(index="round", columns="seed", values="accuracy")
            m = c.mean(axis=1)
            line, = ax.plot(m.index, m.values, marker=".", label=name, ls="--" if "matched" in name or "rebal" in name else "-")
            if len(seeds) > 1:
                bands = [mean_interval(c.loc[r].to_numpy(), level) for r in c.index]
                ax.fill_between(m.index, np.clip([iv.low for iv in bands], 0, 100), np.clip([iv.high for iv in bands], 0, 100),
                                color=line.get_color(), alpha=0.12)
        ax.set_title(f"Dirichlet β = {beta}"); ax.set_xlabel("training round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].set_ylabel("global accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    return fig


def domain_sizes_table(sizes: pd.DataFrame, seed: int):
    """Seed ``seed``'s domains (:func:`domain_cell`'s ``domain_sizes``): per domain, its size, its
    client's train set, its test set and the classes the client holds."""
    table = sizes[sizes.seed == seed].drop(columns="seed").set_index("domain")
    return show_table(table.rename(columns=SIZE_NAMES).rename_axis("domain"))


def domain_tables(domain: pd.DataFrame, names: Sequence[str]) -> tuple:
    """The domain-skew results over the full seeds, in two tables so that no column leaves the
    page: AVG and STD over the domains (what the claims read; the best in bold), then each domain's
    accuracy; every cell the mean ± the half-width of its interval, rows in :data:`DOM_ORDER`."""
    full = domain[domain.full]
    dom_cols = [*names, "AVG", "STD"]
    long = full.melt(id_vars=["seed", "base", "method"], value_vars=dom_cols, var_name="column", value_name="value")
    table = seed_table(long, ["base", "method"], "column", "value").loc[DOM_ORDER, dom_cols]
    table.columns.name = None
    table.index = pd.Index([v if v in ("FedAvg", "FedProx", "FedProto") or not v.startswith("+") else f"{b} {v}"
                            for b, v in table.index], name="method")
    avg = table[["AVG", "STD"]].rename(columns={"AVG": "AVG over the domains (%)", "STD": "STD over the domains (points)"})
    return (show_table(avg, best={"AVG over the domains (%)": "max", "STD over the domains (points)": "min"}),
            show_table(table[list(names)].rename(columns=lambda c: f"{c} (%)"), best={f"{c} (%)": "max" for c in names}))


def swing_reading(fa_seeds: pd.DataFrame, names: Sequence[str]) -> str:
    """Why FedAvg's AVG varies over the seeds, from its per-seed rows ``fa_seeds`` (index: the
    seed; a column per domain of ``names`` and ``AVG``): one domain, when the largest range of a
    domain over the seeds, divided by the domains, is at least half AVG's range; otherwise the
    seeds move the domains together (said with the weakest seed's best domain)."""
    swing = fa_seeds[list(names)].max() - fa_seeds[list(names)].min()
    if swing.max() / len(names) >= (fa_seeds["AVG"].max() - fa_seeds["AVG"].min()) / 2:
        return "one domain accounts for most of AVG's spread over the seeds"
    weak = fa_seeds["AVG"].idxmin()  # the seed with the lowest AVG
    return (f"the seeds move the domains together (in seed {weak}, the weakest, FedAvg's best domain reaches "
            f"{fa_seeds.loc[weak, list(names)].max():.1f} %), so it is the seed, not one domain, that widens the AVG intervals")


def domain_numbers(domain: pd.DataFrame, names: Sequence[str]) -> tuple[dict[str, Any], Any]:
    """The domain-skew numbers of the prose, over the full seeds: per base its mean AVG alone and
    with GGEUR's steps (``dom_<base>_avg``, ``_s1``, ``_s12``) and its STD (``_std``, ``_std12``),
    FedAvg's weakest and strongest domain, and how FedAvg's accuracy swings over the seeds
    (:func:`swing_reading`); and the table of FedAvg's and FedAvg + GGEUR's per-seed values."""
    full = domain[domain.full]

    def dom_v(base: str, method: str, column: str = "AVG") -> np.ndarray:
        return full[(full.base == base) & (full.method == method)][column].to_numpy()

    out: dict[str, Any] = {}
    for b in BASES:
        out[f"dom_{b}_avg"] = float(dom_v(b, b).mean())
        if b in ABLATION_BASES:
            out[f"dom_{b}_s1"] = float(dom_v(b, STEP1).mean())
        out[f"dom_{b}_s12"] = float(dom_v(b, STEPS12).mean())
        out[f"dom_{b}_std"] = float(dom_v(b, b, "STD").mean())
        out[f"dom_{b}_std12"] = float(dom_v(b, STEPS12, "STD").mean())
    per_domain = full[(full.base == "FedAvg") & (full.method == "FedAvg")][list(names)].mean()
    out.update(dom_min=float(per_domain.min()), dom_min_name=str(per_domain.idxmin()), dom_max=float(per_domain.max()),
               dom_max_name=str(per_domain.idxmax()))
    per_seed = (full[(full.base == "FedAvg") & full.method.isin(["FedAvg", STEPS12])]
                .set_index(["method", "seed"])[[*names, "AVG"]])
    fa_seeds = per_seed.loc["FedAvg"]
    swing = fa_seeds[list(names)].max() - fa_seeds[list(names)].min()
    out.update(swing_name=str(swing.idxmax()), swing_min=float(fa_seeds[swing.idxmax()].min()),
               swing_max=float(fa_seeds[swing.idxmax()].max()), n_domains=len(names),
               swing_avg=float(swing.max() / len(names)), avg_range=float(fa_seeds["AVG"].max() - fa_seeds["AVG"].min()),
               swing_reading=swing_reading(fa_seeds, names))
    table = show_table(per_seed.rename(columns=lambda c: f"{c} (%)").rename(index=lambda m: m if m == "FedAvg" else f"FedAvg {m}",
                                                                          level="method"), digits=1)
    return out, table


def probe_numbers(probe: pd.DataFrame, threshold: float, names: Sequence[str], level: float = 0.95) -> tuple[dict[str, Any], Any]:
    """The regime check "signal in every domain" in numbers and words, from the chapter's
    ``probe`` frame (:func:`chapter_frames`: :func:`probe_rows` indexed by seed and domain; every
    seed) and the check's ``threshold`` (%): the table per domain of ``names`` (the probe accuracy,
    the zero coordinates and the mean norm, each the mean ± the half-width of its interval over
    the seeds at ``level``) and the numbers ``probe_min`` (the lowest accuracy of any domain and
    seed), ``probe_min_domain``, ``probe_min_seed``, ``probe_threshold``, ``probe_failed`` (how
    many domains' means over the seeds fall below it, of ``probe_domains``), the accuracy, zeros
    and norm of the weakest domain (``probe_weak_*``, means over the seeds; its accuracy is the
    check's value) and of
    the others (``probe_rest_*``: the lowest accuracy, the lowest zeros and norm ranges), and
    ``probe_reading``: whether the check passes and, where it fails, what setting would make the
    domain-skew rows testable.

    Examples
    --------
    >>> probe = pd.DataFrame({"seed": [0, 0, 1, 1], "domain": ["a", "b"] * 2, PROBE: [90.0, 30.0, 88.0, 60.0],
    ...                       ZEROS: [80.0, 99.0, 81.0, 97.0], NORM: [8.0, 0.2, 9.0, 1.0]}).set_index(["seed", "domain"])
    >>> n, _ = probe_numbers(probe, 50.0, ["a", "b"])
    >>> n["probe_min"], n["probe_min_domain"], n["probe_failed"], n["probe_domains"], n["probe_weak_acc"]
    (30.0, 'b', 1, 2, 45.0)
    >>> n["probe_reading"].split(":")[0]
    'the check fails'
    """
    tidy = probe.reset_index()
    acc = tidy.set_index(["seed", "domain"])[PROBE]
    worst = acc.idxmin()
    per_domain = tidy.groupby("domain")[[PROBE, ZEROS, NORM]].mean().reindex(list(names))
    weak = str(per_domain[PROBE].idxmin())
    rest = per_domain.drop(index=weak)
    below = per_domain[PROBE] < threshold  # the check: each domain's mean over the seeds
    failed = int(below.sum())
    out = {"probe_min": float(acc.min()), "probe_min_domain": str(worst[1]), "probe_min_seed": int(worst[0]),
           "probe_threshold": float(threshold), "probe_failed": failed, "probe_domains": int(len(per_domain)),
           "probe_weak": weak, "probe_weak_acc": float(per_domain.loc[weak, PROBE]),
           "probe_weak_zeros": float(per_domain.loc[weak, ZEROS]), "probe_weak_norm": float(per_domain.loc[weak, NORM]),
           "probe_rest_acc": float(rest[PROBE].min()) if len(rest) else float("nan"),
           "probe_rest_zeros": float(rest[ZEROS].max()) if len(rest) else float("nan"),
           "probe_rest_norm": float(rest[NORM].min()) if len(rest) else float("nan")}
    failing = [str(d) for d in per_domain.index[below]]
    out["probe_reading"] = (
        f"the check fails: {failed} of the {len(per_domain)} domains fall below it on average ({', '.join(failing)}), so every "
        "domain-skew row reads “untestable in this setting”: a domain whose frozen embeddings a linear classifier cannot "
        "read cannot show what GGEUR's augmentation does to it. The rows become testable with an encoder, pre-trained on "
        "other data, that separates the classes of every domain, as CLIP does in the paper (the `clip_checkpoint` "
        "option loads one)" if failed else
        "the check passes: every domain carries class signal on average over the seeds, so the domain-skew rows are testable in this "
        "setting, as far as this check goes")
    long = tidy.melt(id_vars=["seed", "domain"], value_vars=[PROBE, ZEROS, NORM], var_name="column", value_name="value")
    table = seed_table(long, "domain", "column", "value", digits=1, level=level).reindex(index=list(names), columns=[PROBE, ZEROS, NORM])
    table.columns.name = None
    return out, show_table(table, best={PROBE: "max"})


def similarity_numbers(frames: Mapping[str, pd.DataFrame]) -> tuple[dict[str, Any], Any]:
    """Figure 6 in numbers, from the chapter's similarity rows (``frames["similarity"]``, every
    seed; :func:`chapter_frames`): the mean :math:`S` on the diagonal and off it, how many rows have
    their maximum on the diagonal (of ``sim_rowmax_of``) and its share against chance; and the table
    over the seeds per other domain."""
    sim = frames["similarity"]
    n_classes = int(frames["domain_encoder"]["classes"].iloc[0])
    seeds = list(dict.fromkeys(sim["seed"]))
    per_seed = sim.groupby("seed")[[SAME, DIFFERENT]].mean().reindex(seeds)
    n_others = sim["other domain"].nunique()
    share = (sim.groupby("seed")[ROWMAX].sum().reindex(seeds) / (n_classes * n_others)).to_numpy()
    out = {"sim_diag": float(per_seed[SAME].mean()), "sim_off": float(per_seed[DIFFERENT].mean()),
           "sim_rowmax": float(sim.groupby("seed")[ROWMAX].sum().mean()), "sim_rowmax_of": n_classes * n_others,
           "sim_rowmax_pct": float(100 * share.mean()), "chance_pct": 100 / n_classes}
    long = sim.melt(id_vars=["seed", "other domain"], var_name="column", value_name="value")
    table = seed_table(long, "other domain", "column", "value", digits=2)
    table.columns.name = None
    return out, show_table(table.rename(columns={ROWMAX: f"{ROWMAX} (of {n_classes})"}))


def plot_similarity(heatmaps: pd.DataFrame, seed: int, k: int):
    """The chapter's heat maps (Figure 6): seed ``seed``'s similarity between every class of the
    first domain (rows) and every class of each other domain (columns), and their mean, on one
    colour scale from 0 to ``k``. Returns the figure."""
    maps = heatmaps[heatmaps.seed == seed]
    others = list(dict.fromkeys(maps["other domain"]))
    mats = {o: maps[maps["other domain"] == o].pivot(index="row", columns="column", values="S").to_numpy() for o in others}
    panels = [(f"MNIST vs {o}", f"{o} class", mats[o]) for o in others]
    panels.append((f"mean of the {len(others)} domains", "class of the other domain", np.nanmean([mats[o] for o in others], axis=0)))
    n_rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(n_rows, 2, figsize=(9, 4.1 * n_rows), squeeze=False, layout="constrained")
    for ax, (title, xlabel, mat) in zip(axes.flat, panels):
        im = ax.imshow(mat, vmin=0, vmax=k, cmap="viridis")
        ax.set_title(title); ax.set_xlabel(xlabel); ax.set_ylabel("MNIST class")
        ax.set_xticks(range(mat.shape[1])); ax.set_yticks(range(mat.shape[0]))
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label=f"similarity S (0 to k = {k})")
    return fig


def cost_summary(embeddings: ArrayDataset, total: int, seed: int, frames: Mapping[str, pd.DataFrame], repeats: int = 5):
    """The cost of the augmentation: the milliseconds to generate one class of ``total`` samples
    around ten samples of the first sample's class (:func:`fedlib.geometry.augment`, the mean of
    ``repeats``; the stream of client 0's local work in round 0), and the seconds of every
    label-skew and domain-skew run added up (``frames``: the chapter's). Returns the table and the
    numbers ``gen_time_ms``, ``label_seconds`` and ``domain_seconds`` (measured)."""
    emb = embeddings
    shapes = class_shapes(ClassMoments.from_features(emb.x, emb.y, emb.n_classes))
    c0 = int(emb.y[0])
    xc = emb.x[emb.y == c0][:10]
    t0 = time.perf_counter()
    for _ in range(repeats):
        augment(xc, shapes.eigenvalues[c0], shapes.eigenvectors[c0], total, generator=torch_generator(seed, 0, 0, LOCAL_TRAIN))
    numbers = {"gen_time_ms": 1000 * (time.perf_counter() - t0) / repeats,
               "label_seconds": float(frames["label"]["seconds"].sum()), "domain_seconds": float(frames["domain"]["seconds"].sum())}
    table = pd.Series({"generate one class (ms)": numbers["gen_time_ms"],
                       "all label-skew runs, all seeds (s)": numbers["label_seconds"],
                       "all domain-skew runs, all seeds (s)": numbers["domain_seconds"]},
                      name="value").rename_axis("task").to_frame()
    return show_table(table, digits=1), numbers


# ------------------------------------------------------------------------------------------------
# The worked solutions of the exercises (reduced runs: the first seed)
# ------------------------------------------------------------------------------------------------


def yardstick(result: ClaimResult) -> float:
    """Half the width of a decided claim's interval, ``(high − low) / 2``: the seed-to-seed
    yardstick a single-seed difference of the worked solutions is read against.

    Examples
    --------
    >>> from fedbook.claims import Claim, evaluate
    >>> c = Claim("gain", "X beats Y.", "Table 2", "accuracy, X − Y, points", "greater", resolution=0.1)
    >>> r = evaluate(c, [2.0, 3.0, 2.5])
    >>> yardstick(r) == (r.interval.high - r.interval.low) / 2, round(yardstick(r), 2)
    (True, 1.24)
    """
    return result.interval.width / 2


def exercise1(runs: pd.DataFrame, label: pd.DataFrame, seed: int, beta: float, embeddings: ArrayDataset, scale: float,
              noise: float) -> dict[str, Any]:
    """Exercise 1's worked solution, from its reduced ``runs`` (:func:`label_cell` on the
    embeddings times ``scale``; seed ``seed`` at ``beta``) and the chapter's ``label`` runs of the
    same seed: the numbers ``ex1_*`` (each run at both scales, the paper's formula against the
    code's and against the rebalancing control, how far the code's run and FedAvg moved) and the
    sentences that depend on them, read against the seed-to-seed yardstick ``noise``
    (:func:`yardstick`): ``ex1_rb_reading`` (did the paper's formula move toward the
    rebalancing-only control, as the falling ratio :math:`\\mathrm{tr}(\\Sigma^2)/\\mathrm{tr}(\\Sigma)`
    predicts), ``ex1_move_reading`` (do the code's run and FedAvg move together beyond the
    yardstick) and ``ex1_reading`` (can one seed tell the formulas apart)."""
    emb = embeddings
    x = scale * emb.x
    ratio = float(trace_ratio(class_shapes(ClassMoments.from_features(x, emb.y, emb.n_classes)).eigenvalues).median())
    small = {m: float(a) for m, a in zip(runs["method"], runs["accuracy (%)"])}
    full = {m: of_seed(label, seed, beta, m) for m in small}
    G, PAPER, RB = GGEUR_CODE, GGEUR_PAPER, "FedAvg, rebalanced"
    out: dict[str, Any] = {"ex1_scale": scale, "ex1_ratio": ratio}
    for key, name in (("fedavg", "FedAvg"), ("code", G), ("paper", PAPER), ("rb", RB)):
        out[f"ex1_{key}_full"], out[f"ex1_{key}_small"] = full[name], small[name]
    gap_full, gap_small = full[PAPER] - full[G], small[PAPER] - small[G]
    rb_full, rb_small = full[PAPER] - full[RB], small[PAPER] - small[RB]
    code_move, fedavg_move = small[G] - full[G], small["FedAvg"] - full["FedAvg"]
    out.update(ex1_gap_full=gap_full, ex1_gap_small=gap_small, ex1_prb_full=rb_full, ex1_prb_small=rb_small,
               ex1_code_move=code_move, ex1_fedavg_move=fedavg_move)
    rb_change = abs(rb_full) - abs(rb_small)  # > 0: the paper's formula moved closer to the rebalancing control
    out["ex1_rb_reading"] = (
        sign_word(rb_change, "closer to the rebalancing-only control, as the ratio predicts",
                  "further from the rebalancing-only control, against what the ratio predicts",
                  "as close to the rebalancing-only control as at scale 1: the ratio's prediction does not show")
        + ("" if not abs(rb_change) < noise else " (a change within the seed-to-seed yardstick, so one seed does not "
           "settle it)"))
    out["ex1_move_reading"] = (
        "both move the same way by more than the seed-to-seed yardstick, so the change is not the noise "
        "formula's; a plausible cause, not measured here, is training the classifier on smaller inputs (with Adam a step moves "
        "the weights by about the learning rate whatever the input scale, so the logits move less per step)"
        if np.sign(code_move) == np.sign(fedavg_move) and min(abs(code_move), abs(fedavg_move)) > noise else
        "they do not both move the same way by more than the seed-to-seed yardstick, so one seed does not say what moved them")
    out["ex1_reading"] = ("both gaps are within the seed-to-seed yardstick, so one seed cannot tell the formulas apart"
                          if max(abs(gap_full), abs(gap_small)) < noise else "at least one gap exceeds the seed-to-seed yardstick")
    return out


EX2_NAMES = [GGEUR_CODE, "FedAvg, matched steps", "FedAvg, rebalanced"]
"""Exercise 2's label-skew runs: GGEUR and its two controls."""


def exercise2_totals(total: int) -> list[int]:
    """Exercise 2's step-1 totals: a quarter (at least 10), once and five times ``total``.

    >>> exercise2_totals(200), exercise2_totals(30)
    ([50, 200, 1000], [10, 30, 150])
    """
    return sorted({max(10, total // 4), total, 5 * total})


def exercise2(runs: pd.DataFrame, label: pd.DataFrame, seed: int, beta: float, total: int, noise: float) -> dict[str, Any]:
    """Exercise 2's worked solution, from its reduced ``runs`` (:func:`label_cell` with the
    :data:`EX2_NAMES` at the totals of :func:`exercise2_totals` but ``total``, column ``total``) and
    the chapter's ``label`` runs (seed ``seed`` at ``beta``: the row at ``total``): the table
    ``ex2_table``, the totals, where the benefit of generated samples over copies (GGEUR −
    rebalanced) peaks and its range, and the sentences ``ex2_peak_reading`` (has it stopped growing)
    and ``ex2_reading`` (is its range beyond the seed-to-seed yardstick ``noise``)."""
    totals = exercise2_totals(total)
    rows = []
    for t in totals:
        if t == total:
            rows.append({"total": t, **{n: of_seed(label, seed, beta, n) for n in EX2_NAMES}})
        else:
            at = runs[runs.total == t]
            rows.append({"total": t, **{n: float(at[at.method == n]["accuracy (%)"].iloc[0]) for n in EX2_NAMES}})
    ex2 = pd.DataFrame(rows).set_index("total")
    ex2["GGEUR − rebalanced"] = ex2[GGEUR_CODE] - ex2["FedAvg, rebalanced"]
    ex2["GGEUR − matched steps"] = ex2[GGEUR_CODE] - ex2["FedAvg, matched steps"]
    table = ex2.rename(columns={GGEUR_CODE: "GGEUR (%)", "FedAvg, matched steps": "matched steps (%)",
                                "FedAvg, rebalanced": "rebalanced (%)", "GGEUR − rebalanced": "GGEUR − rebalanced (points)",
                                "GGEUR − matched steps": "GGEUR − matched steps (points)"}).rename_axis("samples per class after step 1")
    gaps = ex2["GGEUR − rebalanced"]
    peak = int(gaps.idxmax())
    return {"ex2_table": show_table(table, digits=1, formats={c: "+.1f" for c in table.columns if "points" in c}),
            "ex2_totals": ", ".join(map(str, totals)), "ex2_peak": peak,
            "ex2_peak_reading": f"it has not stopped growing by {peak} samples per class" if peak == totals[-1] else
            f"on this seed it stops growing at {peak} samples per class",
            "ex2_spread": float(gaps.max() - gaps.min()),
            "ex2_reading": "smaller than the seed-to-seed yardstick, so this one seed does not show where the benefit stops growing"
            if gaps.max() - gaps.min() < noise else "larger than the seed-to-seed yardstick"}


def encoder_column(domain: pd.DataFrame, similarity: pd.DataFrame, seed: int) -> dict[str, float]:
    """One encoder's column of exercise 3, on seed ``seed`` of its :func:`domain_cell` frames:
    FedAvg's AVG and STD over the domains, the gains of GGEUR's step 1 over FedAvg and of step 2
    over step 1 (:data:`GAIN_STEP2`), and :func:`diagonal_gap` under the paper's and the subspace
    similarity (``similarity``: the rows of both, column ``similarity``).

    Examples
    --------
    >>> domain = pd.DataFrame({"seed": [0] * 3, "base": ["FedAvg"] * 3, "method": ["FedAvg", STEP1, STEPS12],
    ...                        "AVG": [50.0, 53.0, 52.0], "STD": [4.0, 3.0, 2.0]})
    >>> sims = pd.DataFrame({"seed": [0, 0], "similarity": ["paper", "subspace"], SAME: [2.0, 3.0], DIFFERENT: [1.5, 1.0]})
    >>> [float(v) for v in encoder_column(domain, sims, 0).values()]
    [50.0, 4.0, 3.0, -1.0, 0.5, 2.0]
    """
    runs = {v: domain[(domain.seed == seed) & (domain.base == "FedAvg") & (domain.method == v)].iloc[0]
            for v in ("FedAvg", STEP1, STEPS12)}
    sims = similarity[similarity.seed == seed]
    gap = {m: diagonal_gap(sims[sims.similarity == m].to_dict("records")) for m in ("paper", "subspace")}
    return {"AVG, FedAvg (%)": runs["FedAvg"]["AVG"], "STD, FedAvg (points)": runs["FedAvg"]["STD"],
            "gain of step 1 over FedAvg, AVG (points)": runs[STEP1]["AVG"] - runs["FedAvg"]["AVG"],
            GAIN_STEP2: runs[STEPS12]["AVG"] - runs[STEP1]["AVG"],
            "S same − different classes, paper's S": gap["paper"], "S same − different classes, subspace S": gap["subspace"]}


def exercise3(alt: Mapping[str, pd.DataFrame], own: Mapping[str, pd.DataFrame], seed: int, sees: str, level: float,
              step2: ClaimResult) -> dict[str, Any]:
    """Exercise 3's worked solution: seed ``seed``'s :func:`encoder_column` of the chapter's
    domain-skew frames ``own`` (its encoder trained as ``sees`` says) and of the reduced run
    ``alt`` (:func:`domain_cell` with the other encoder), the table ``ex3_table``, the changes
    (MNIST-only encoder − every-domain encoder) of FedAvg's STD and AVG, of the diagonal's lead
    under both similarities (``ex3_diag_d``, ``ex3_sub_d``), the gain of step 2 under each
    encoder, the yardsticks (the half-width of FedAvg's STD interval over the full seeds at
    ``level``, and :func:`yardstick` of the step-2 claim ``step2``), and ``ex3_reading``: which
    changes exceed them."""
    other = "mnist" if sees == "all" else "all"
    table = pd.DataFrame({SEES_TEXT[sees][2] + " (the chapter's)": encoder_column(own["domain"], own["similarity"], seed),
                          SEES_TEXT[other][2]: encoder_column(alt["domain"], alt["similarity"], seed)}).rename_axis("first seed")
    mn, al = (table.columns[1], table.columns[0]) if other == "mnist" else (table.columns[0], table.columns[1])
    d = table[mn] - table[al]  # MNIST-only encoder − every-domain encoder
    d_full = own["domain"][own["domain"].full]
    std = d_full[(d_full.base == "FedAvg") & (d_full.method == "FedAvg")]["STD"].to_numpy()
    std_iv = mean_interval(std, level)
    std_noise, s2_noise = std_iv.half_width, yardstick(step2)
    within = [abs(d["STD, FedAvg (points)"]) < std_noise, abs(d[GAIN_STEP2]) < s2_noise]
    return {"ex3_table": show_table(table, digits=2), "ex3_alt": other,
            "ex3_n_public": int(alt["domain_encoder"]["public images"].iloc[0]),
            "ex3_std_d": float(d["STD, FedAvg (points)"]), "ex3_avg_d": float(d["AVG, FedAvg (%)"]),
            "ex3_s2_mn": float(table.loc[GAIN_STEP2, mn]), "ex3_s2_al": float(table.loc[GAIN_STEP2, al]),
            "ex3_diag_d": float(d["S same − different classes, paper's S"]),
            "ex3_sub_d": float(d["S same − different classes, subspace S"]),
            "ex3_std_noise": std_noise, "ex3_s2_noise": s2_noise,
            "ex3_reading": "both changes are within it, so this one seed is not conclusive" if all(within) else
            "both changes are larger than it" if not any(within) else
            "only the " + ("step-2 change" if within[0] else "STD change") + " is larger than it"}


__all__ = ["ABLATION_BASES", "BASES", "DIFFERENT", "DOMAINS", "DOM_ORDER", "DomainSetup", "ENCODER_SEES", "EX2_NAMES",
           "EX3_RUNS", "GAIN_STEP2", "GGEURStudy", "GGEUR_CODE", "GGEUR_PAPER", "HEADLINE_DOM", "HEADLINE_LABEL",
           "LABEL_METHODS", "LOW_BETA_ONLY", "LabelSetup", "NORM", "PROBE", "PROBE_MAX_ITER", "PROBE_THRESHOLD", "ROWMAX",
           "SAME", "SEES_TEXT", "SIZE_NAMES", "STEP1", "STEPS12", "UNTESTABLE_WORDS", "VS_COPIES", "VS_STEPS", "ZEROS",
           "chapter_frames", "claims_reading", "cost_summary", "curve_drops", "diagonal_gap", "domain_cell",
           "domain_numbers", "domain_sizes_table", "domain_tables", "embedding_summary", "encoder_column", "rank_reading", "rowmax_testability", "encoder_words", "exercise1",
           "exercise2", "exercise2_totals", "exercise3", "label_cell", "label_numbers", "label_table", "of_seed",
           "plot_label_curves", "plot_similarity", "probe_numbers", "probe_rows", "setting_numbers", "similarity_numbers",
           "similarity_rows", "substitutions", "swing_reading", "yardstick"]
