r"""COSMOS's contraction theorems on a synthetic federation whose densities are known (the chapter
*COSMOS: derivations*, ``notebooks/cosmos_derivations.py``, section 3).

From COSMOS (Ge, Yeoh, Zhang and Vorobeychik, "COSMOS: Model-Agnostic Personalized Federated
Learning with Clustered Server Models and Pseudo-Label-Only Communication", arXiv:2605.11165),
Section 5.3: Theorems 5.11-5.12 and Corollary 5.13, Assumptions 5.8 and Definition 5.4.

* :class:`Circle`: Gaussian classes with identity covariance, their means evenly spaced on a
  circle, and the constants of the setting; every client and the server is a :class:`Linear`
  (multinomial logistic) model, in whose class each client's Bayes classifier lies;
* :func:`synthetic_run`: COSMOS on a federation of the circle under one label skew
  (:data:`SETTINGS`), measured after every iteration: the personalization risk, the clients'
  risks, the pseudo-labelers' largest errors (:math:`\bar b`), the importance-weight bounds
  :math:`w_1, w_2` (exact and Monte Carlo), the Bayes risk, and local training alone;
* :func:`theory_table`: what the measurements say of the theorems (Assumption 5.8, the necessary
  condition, a lower bound on :math:`\kappa_2`, the fitted contraction ratio, :func:`fitted_ratio`);
* :func:`client_objective`, :func:`shift_basis` and :func:`hessian_checks`: Definition 5.4's strong
  convexity for a linear client, from the Hessian of its objective.

The chapter calls :func:`synthetic_section` and :func:`hessian_section`, which record their rows
in its check table and return the numbers its prose reads and the tables it shows, and draws
:func:`plot_risks`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.special import logsumexp
from torch import nn

from fedbook.checks import CheckTable
from fedbook.intervals import Interval, paired_interval
from fedbook.page import format_number, show_table
from fedbook.tables import format_small
from fedlib.algorithms.cosmos import COSMOS, COSMOSServer
from fedlib.messages import Message, State, from_state
from fedlib.data import ArrayDataset
from fedlib.distill import PublicSet, consistency_loss, make_public_set
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.rng import LOCAL_ONLY_INIT, derive_seed, isolated_torch_rng, numpy_rng, torch_generator
from fedlib.run import run_federated
from fedlib.training import TrainConfig, local_train
from fedlib.validation import check_int

SETTINGS = ("mild skew", "label groups")
"""The label skews of :func:`synthetic_run`: Dirichlet with :math:`\\alpha =` :data:`SKEW_ALPHA`
(every client holds every class), and the paper's split into two label groups with a share of the
data pooled."""
SKEW_ALPHA = 5.0
"""The Dirichlet concentration of both settings (over all classes under mild skew, inside a group under label groups)."""

DATA, EVALUATION, LOCAL, HESSIAN_AUGMENT, HESSIAN_POINTS = 321, 322, 323, 331, 332
"""The streams under the chapter's seed: the circle's data set, the fresh evaluation samples, each
client's local training alone (keyed by (key, client)), the Hessian's augmentations and its random
parameter points."""


@dataclass(frozen=True)
class Circle:
    """Gaussian classes of identity covariance in the plane whose means lie evenly on a circle, and
    the constants of COSMOS on them.

    Parameters
    ----------
    n_classes : int
        :math:`C`.
    radius : float
        The distance of every class mean from the origin.
    n_per_class : int
        Samples per class of the data set the federation is cut from.
    weight_decay : float
        Adam's weight decay (a ridge term: only it makes a softmax client strongly convex).
    lam : float
        COSMOS's consistency weight :math:`\\lambda`.
    noise : float
        The standard deviation of the augmentations' Gaussian input noise.
    lr : float
        Adam's learning rate.
    pool : float
        The share of every client's data pooled and dealt out again under label groups.

    Examples
    --------
    >>> Circle(n_classes=4, radius=3.0).means.round(6).tolist()
    [[3.0, 0.0], [0.0, 3.0], [-3.0, 0.0], [-0.0, -3.0]]
    """

    n_classes: int = 4
    radius: float = 3.0
    n_per_class: int = 250
    weight_decay: float = 1e-2
    lam: float = 1.8
    noise: float = 0.1
    lr: float = 1e-2
    pool: float = 0.1

    def __post_init__(self) -> None:
        check_int("n_classes", self.n_classes, low=2)
        check_int("n_per_class", self.n_per_class, low=1)

    dim = 2
    """The input dimension (not a field: the plane of the circle)."""

    @property
    def means(self) -> np.ndarray:
        """The class means, float64 of shape ``(C, 2)``."""
        C = self.n_classes
        return self.radius * np.stack([np.cos(2 * np.pi * np.arange(C) / C), np.sin(2 * np.pi * np.arange(C) / C)], axis=1)

    def draw(self, rng: np.random.Generator, prior: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` samples ``(x, y)`` of the mixture with class shares ``prior`` (shape ``(C,)``):
        ``x`` float64 of shape ``(n, dim)``, ``y`` int of shape ``(n,)``."""
        y = rng.choice(self.n_classes, size=n, p=prior)
        return self.means[y] + rng.normal(size=(n, self.dim)), y

    def log_density(self, x: np.ndarray) -> np.ndarray:
        """:math:`\\log \\phi_y(x)` of every class up to their common constant, shape ``(n, C)``."""
        return -0.5 * ((x[:, None, :] - self.means[None]) ** 2).sum(-1)

    def model(self) -> Callable[[], nn.Module]:
        """The factory of this setting's :class:`Linear` model."""
        return functools.partial(Linear, self.dim, self.n_classes)


class Linear(nn.Module):
    """Multinomial logistic regression: one linear layer (``head``) on the flattened input.

    Examples
    --------
    >>> Linear(2, 4)(torch.zeros(3, 2)).shape
    torch.Size([3, 4])
    """

    def __init__(self, dim: int = 2, n_classes: int = 4, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.head = nn.Linear(dim, n_classes, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.reshape(len(x), -1))


def linear_from(arrays: Mapping[str, torch.Tensor], dim: int, n_classes: int) -> Linear:
    """A :class:`Linear` in evaluation mode holding ``arrays`` (its ``state_dict``), built without a
    random draw (``torch.nn.utils.skip_init``: its initial weights would be overwritten)."""
    model = torch.nn.utils.skip_init(Linear, dim, n_classes)
    model.load_state_dict(arrays)
    return model.eval()


def error_rate(predict: Callable[[torch.Tensor], torch.Tensor], x: np.ndarray, y: np.ndarray) -> float:
    """The share of the samples ``x`` (float64 of shape ``(n, d)``) whose argmax of ``predict``
    (float32 inputs) is not ``y``.

    Examples
    --------
    >>> error_rate(lambda z: torch.cat([z, -z], 1), np.array([[1.0], [-1.0], [2.0]]), np.array([0, 0, 0]))
    0.3333333333333333
    """
    with torch.no_grad():
        return float((predict(torch.tensor(x, dtype=torch.float32)).argmax(1).numpy() != y).mean())


@dataclass
class SyntheticRun:
    """What :func:`synthetic_run` measured.

    Attributes
    ----------
    frame : DataFrame indexed by ``t``
        Per iteration: ``R†(h)`` (the personalization risk: each client's cluster model on its
        distribution, the mean over clients), ``mean R(f_i^(t,1))`` (the clients' own models),
        ``b̄ on Q`` and ``b̄ on D_i`` (the largest error of a pseudo-labeler, cluster model or
        cluster mean, on the public distribution and on the clients' distributions).
    bayes : float
        The clients' mean Bayes risk.
    local : float
        The clients' mean risk after training on their own data alone.
    prior : np.ndarray of shape (n_clients, C)
        Each client's class shares.
    public : PublicSet
        The public set :math:`U`.
    w_exact, w_mc : tuple of float
        :math:`(w_1, w_2)`, exactly (:math:`C \\max_y \\pi_i(y)`, :math:`1/(C \\min_y \\pi_i(y))`,
        the largest over clients) and as a Monte Carlo maximum over the evaluation samples.
    hessian_points : list of (Linear, torch.Tensor)
        Every client's final model and its teacher's labels on :math:`U` (float64 of shape
        ``(|U|, C)``), where :func:`hessian_checks` evaluates Definition 5.4.
    """

    frame: pd.DataFrame
    bayes: float
    local: float
    prior: np.ndarray
    public: PublicSet
    w_exact: tuple[float, float]
    w_mc: tuple[float, float]
    hessian_points: list


@dataclass
class WithoutTeacher(COSMOS):
    """COSMOS whose server never sends its cluster model's labels back: the clients train on their
    own data only (no digest, hence no consistency term), while the server still clusters them
    and distils a model per cluster from their pseudo-labels. The control of the contraction
    check: the theorems' contraction runs through the teacher (Theorem 5.12 bounds a client's
    next risk by its cluster model's), so without it the personalization risk has no reason to
    contract at the same rate."""

    def configure_train(self, server: State, round_: int, clients) -> dict[int, Message]:
        """The round number only, one message shared by every client: never a teacher."""
        return dict.fromkeys(clients, Message(meta={"round": int(round_)}, kind="start"))


def synthetic_run(setting: str, *, seed: int, n_clients: int, n_eval: int, local_epochs: int, rounds: int,
                  circle: Circle = Circle(), teacher: bool = True, local_only: bool = True,
                  risk_only: bool = False) -> SyntheticRun:
    """COSMOS on a federation of the circle, measured after every iteration.

    A data set of ``circle.n_per_class`` samples per class, 30 % of it the public set; the rest
    cut over ``n_clients`` clients by the ``setting`` (:data:`SETTINGS`: a Dirichlet split with
    :math:`\\alpha = 5` and one cluster targeted, or two label groups with ``circle.pool`` pooled
    and two clusters targeted). Every model is a :class:`Linear` trained with Adam
    (``circle.lr``, ``circle.weight_decay``): 20 pre-training epochs, 2 local and 2 distillation
    epochs per round, 10 server epochs; :math:`\\lambda` = ``circle.lam``, augmentation noise
    ``circle.noise``. Risks and errors are measured on ``n_eval`` fresh samples of every client's
    distribution and of the public one. Local training alone trains a fresh model per client for
    ``local_epochs`` epochs, its initial weights from the stream ``(client, LOCAL_ONLY_INIT)``.

    Parameters
    ----------
    setting : str
        One of :data:`SETTINGS`.
    seed : int
        Every stream derives from it.
    n_clients, n_eval, local_epochs, rounds : int
        Clients, evaluation samples per distribution, epochs of local training alone, COSMOS iterations.
    circle : Circle
        The setting's constants.
    teacher : bool, default True
        ``False`` runs the control :class:`WithoutTeacher` instead of COSMOS (the same federation,
        models, optimizers and streams).
    local_only : bool, default True
        ``False`` skips local training alone (``local`` is then NaN): the contraction check's
        further seeds read only the risks.
    risk_only : bool, default False
        ``True`` measures only what the contraction check reads: ``R†(h)`` per iteration and the
        Bayes risk (the frame's other columns and ``w_mc`` are NaN, ``hessian_points`` is empty).
        The run itself is the same; so is every number it does measure, bit for bit.

    Returns
    -------
    SyntheticRun
    """
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; valid: {', '.join(SETTINGS)}")
    for name, value in (("n_clients", n_clients), ("n_eval", n_eval), ("local_epochs", local_epochs), ("rounds", rounds)):
        check_int(name, value, low=1)
    C, n = circle.n_classes, n_clients
    linear = circle.model()
    rng = numpy_rng(seed, DATA)
    x, y = circle.draw(rng, np.full(C, 1 / C), C * circle.n_per_class)
    data = ArrayDataset(torch.tensor(x, dtype=torch.float32), torch.tensor(y), n_classes=C, name="circle")
    pub, rest, _ = make_public_set(data, 0.3, seed=seed)
    if setting == "mild skew":
        fed = make_federation(rest, n_clients=n, partition="dirichlet", alpha=SKEW_ALPHA, min_size=10,
                              global_test_per_class=20, seed=seed)
        target = 1
    else:
        fed = make_federation(rest, n_clients=n, partition="grouped_dirichlet", n_groups=2, alpha=SKEW_ALPHA,
                              pool_fraction=circle.pool, global_test_per_class=20, seed=seed)
        target = 2
    held_counts = np.stack([np.bincount(np.r_[c.train.labels_np, c.test.labels_np], minlength=C) for c in fed.clients])
    prior = held_counts / held_counts.sum(axis=1, keepdims=True)
    adam = functools.partial(TrainConfig, batch_size=32, optimizer="adam", lr=circle.lr, weight_decay=circle.weight_decay)
    cosmos = (COSMOS if teacher else WithoutTeacher)(public=pub, server_model=linear, server_train=adam(epochs=10), pretrain=adam(epochs=20),
                    train=adam(epochs=2), distill=adam(epochs=2), target_clusters=target, lam=circle.lam,
                    noise=circle.noise, seed=seed)
    erng = numpy_rng(seed, EVALUATION)
    evals = [circle.draw(erng, prior[i], n_eval) for i in range(n)]
    eval_q = circle.draw(erng, np.full(C, 1 / C), n_eval)
    with np.errstate(divide="ignore"):
        log_prior = np.log(prior)
    bayes = np.array([float((np.argmax(circle.log_density(xe) + log_prior[i], 1) != ye).mean())
                      for i, (xe, ye) in enumerate(evals)])
    w_mc = [(math.nan, math.nan)] if risk_only else []
    for i in range(0 if risk_only else n):
        lp = circle.log_density(np.r_[evals[i][0], eval_q[0]])
        log_p, log_q = logsumexp(lp + log_prior[i], axis=1), logsumexp(lp, axis=1) - np.log(C)
        w_mc.append((float(np.exp(log_p - log_q).max()), float(np.exp(log_q - log_p).max())))
    with np.errstate(divide="ignore"):
        w_exact = [(float(C * prior[i].max()), float(1 / (C * prior[i].min()))) for i in range(n)]
    local = []  # local training alone: the same model on the client's data, long enough to converge
    for i, client in enumerate(fed.clients if local_only else []):
        with isolated_torch_rng(derive_seed(seed, i, LOCAL_ONLY_INIT)):
            model = linear()
        local_train(model, client.train.x, client.train.y, adam(epochs=local_epochs), torch_generator(seed, LOCAL, i))
        local.append(error_rate(model.eval(), *evals[i]))
    rows, hessian_points = [], []

    def observe(t, server, states):
        typed = from_state(COSMOSServer, server)
        groups = typed.client_groups()
        servers = {g: linear_from(typed.server[g], circle.dim, C) for g in set(groups.values())}

        def mean_of(g):
            members = [clients[j] for j in range(n) if groups[j] == g]
            return lambda z: torch.stack([torch.softmax(mm(z), 1) for mm in members]).mean(0)

        r_server = [error_rate(servers[groups[i]], *evals[i]) for i in range(n)]
        if risk_only:
            rows.append({"t": t, "R†(h)": float(np.mean(r_server)), "mean R(f_i^(t,1))": math.nan,
                         "b̄ on Q": math.nan, "b̄ on D_i": math.nan})
            return
        clients = [linear_from(states[i].with_prefix("model/"), circle.dim, C) for i in range(n)]
        r_client = [error_rate(clients[i], *evals[i]) for i in range(n)]
        b_q = max(max(error_rate(servers[g], *eval_q), error_rate(mean_of(g), *eval_q)) for g in servers)
        # a cluster model's error on D_i is client i's term of R†, measured just above
        b_d = max(max(r_server[i], error_rate(mean_of(groups[i]), *evals[i])) for i in range(n))
        rows.append({"t": t, "R†(h)": float(np.mean(r_server)), "mean R(f_i^(t,1))": float(np.mean(r_client)),
                     "b̄ on Q": b_q, "b̄ on D_i": b_d})
        # the clients' distillation objective at their final parameters (Definition 5.4)
        hessian_points[:] = [(clients[i], typed.teacher[groups[i]].double()) for i in range(n)]

    run_federated(cosmos, fed, linear, LoopConfig(rounds=rounds, seed=seed, evaluate_last=False), RunOptions(observe=observe))
    return SyntheticRun(frame=pd.DataFrame(rows).set_index("t"), bayes=float(bayes.mean()),
                        local=float(np.mean(local)) if local else math.nan,
                        prior=prior, public=pub, w_exact=(max(w for w, _ in w_exact), max(w for _, w in w_exact)),
                        w_mc=(max(w for w, _ in w_mc), max(w for _, w in w_mc)), hessian_points=hessian_points)


def fitted_ratio(values) -> float | None:
    """A per-iteration contraction ratio: ``exp`` of the least-squares slope of ``log(values)``
    against the iteration; ``None`` with fewer than two values or one that is not positive.

    Examples
    --------
    >>> round(fitted_ratio([0.8, 0.4, 0.2, 0.1]), 12), fitted_ratio([0.1, 0.0])
    (0.5, None)
    """
    v = np.asarray(values, dtype=float)
    if len(v) < 2 or (v <= 0).any():
        return None
    return float(np.exp(np.polyfit(np.arange(len(v)), np.log(v), 1)[0]))


def theory_table(runs: Mapping[str, SyntheticRun], controls: Mapping[str, SyntheticRun] | None = None) -> pd.DataFrame:
    """What the measurements of each setting's run say of Theorems 5.11-5.12.

    With :math:`\\bar b` the largest pseudo-labeler error over the iterations: ``b̄ ≤ 1/3 (Ass.
    5.8)``, the necessary condition ``1/b̄ > 2w1w2 + 1``, the lower bound ``κ2 ≥``
    :math:`4 w_1 w_2 / (1/\\bar b - 1)^2` (with the exact :math:`w` and with the Monte Carlo ones; ∞
    unless :math:`0 < \\bar b < 1`), the fitted ratios (:func:`fitted_ratio`) of :math:`R^\\dagger`
    and of its excess over the Bayes risk, the first and last :math:`R^\\dagger`, the Bayes risk and
    local training alone; with ``controls``, also ``fitted ratio without the teacher``: the
    fitted ratio of the control's :math:`R^\\dagger` − Bayes (:class:`WithoutTeacher` on the same
    federation), which the contraction check compares with COSMOS's.

    Parameters
    ----------
    runs : mapping of str to SyntheticRun
        :func:`synthetic_run` by setting.
    controls : mapping of str to SyntheticRun, optional
        :func:`synthetic_run` with ``teacher=False``, by setting (the same settings).

    Returns
    -------
    DataFrame indexed by ``setting``
    """
    rows = []
    for setting, res in runs.items():
        f = res.frame
        b_bar = float(f[["b̄ on Q", "b̄ on D_i"]].to_numpy().max())
        w1, w2 = res.w_exact
        w1_mc, w2_mc = res.w_mc
        wprod = w1 * w2
        k2_low = 4 * wprod / (1 / b_bar - 1) ** 2 if 0 < b_bar < 1 else math.inf
        k2_low_mc = 4 * w1_mc * w2_mc / (1 / b_bar - 1) ** 2 if 0 < b_bar < 1 else math.inf
        excess = f["R†(h)"] - res.bayes
        rows.append({
            "setting": setting, "w1": w1, "w2": w2, "w1 (Monte Carlo)": w1_mc, "w2 (Monte Carlo)": w2_mc, "b̄": b_bar,
            "b̄ ≤ 1/3 (Ass. 5.8)": b_bar <= 1 / 3, "1/b̄ > 2w1w2 + 1": 1 / b_bar > 2 * wprod + 1 if b_bar > 0 else True,
            "κ2 ≥": k2_low, "κ2 ≥ (Monte Carlo w)": k2_low_mc,
            "fitted ratio of R†": fitted_ratio(f["R†(h)"]), "fitted ratio of R† − Bayes": fitted_ratio(excess),
            "R† first": float(f["R†(h)"].iloc[0]), "R† last": float(f["R†(h)"].iloc[-1]), "Bayes risk": res.bayes,
            "local only": res.local})
        if controls is not None:
            rows[-1]["fitted ratio without the teacher"] = fitted_ratio(controls[setting].frame["R†(h)"] - controls[setting].bayes)
    return pd.DataFrame(rows).set_index("setting")


def client_objective(theta: torch.Tensor, x: torch.Tensor, x_aug: torch.Tensor, target: torch.Tensor, lam: float,
                     n_classes: int, dim: int) -> torch.Tensor:
    """A linear client's objective :math:`\\hat F` without the ridge (Definition 5.4): the mean over
    :math:`U` of :math:`\\mathrm{KL}(t \\Vert g(x)) + \\lambda\\, \\mathrm{KL}(g(x) \\Vert g(x'))`,
    differentiated through both sides as in the paper.

    Parameters
    ----------
    theta : tensor of shape (C * dim + C,)
        The weights ``W`` (``(C, dim)``, row-major) followed by the biases.
    x, x_aug : tensor of shape (n, dim)
        The public inputs and one draw of their augmentations.
    target : tensor of shape (n, C)
        The teacher's labels.
    lam : float
    n_classes, dim : int

    Returns
    -------
    torch.Tensor, a scalar

    Examples
    --------
    >>> x = torch.zeros(2, 2, dtype=torch.float64)
    >>> float(client_objective(torch.zeros(6, dtype=torch.float64), x, x, torch.full((2, 2), 0.5, dtype=torch.float64), 1.0, 2, 2))
    0.0
    """
    W, b = theta[:n_classes * dim].reshape(n_classes, dim), theta[n_classes * dim:]
    z, z_aug = x @ W.T + b, x_aug @ W.T + b
    kl = (torch.special.xlogy(target, target) - target * torch.log_softmax(z, 1)).sum(1)
    return (kl + lam * consistency_loss(z_aug, z)).mean()


def shift_basis(n_classes: int, dim: int) -> torch.Tensor:
    """An orthonormal basis of the ``dim + 1`` parameter directions that add the same number to
    every logit (every row of ``W`` plus one vector, every bias plus one number), float64 of shape
    ``(n_classes * (dim + 1), dim + 1)``, in the layout of :func:`client_objective`'s ``theta``.

    Examples
    --------
    >>> S = shift_basis(3, 2)
    >>> tuple(S.shape), bool(torch.allclose(S.T @ S, torch.eye(3, dtype=torch.float64)))
    ((9, 3), True)
    """
    f64 = torch.float64
    cols = []
    for j in range(dim):
        W = torch.zeros(n_classes, dim, dtype=f64)
        W[:, j] = 1
        cols.append(torch.cat([W.flatten(), torch.zeros(n_classes, dtype=f64)]))
    cols.append(torch.cat([torch.zeros(n_classes * dim, dtype=f64), torch.ones(n_classes, dtype=f64)]))
    return torch.linalg.qr(torch.stack(cols, 1))[0]


def hessian_checks(runs: Mapping[str, SyntheticRun], *, seed: int, hessian_points: int, circle: Circle = Circle()) -> dict:
    """Definition 5.4 for a linear client: the Hessian of :func:`client_objective` (float64, one
    draw of the augmentations) at every client's final parameters of every run, and at
    ``hessian_points`` random parameter points (random teacher labels, the last run's public
    set) for the augmentation radii ``circle.noise``, 1 and 3.

    Returns
    -------
    dict
        ``table`` (the smallest eigenvalue off the shift directions and the share of points with
        negative curvature, per place and radius), ``flat_err`` (the largest entry of the Hessian
        times :func:`shift_basis`: 0 means flat along the shifts), ``final_min`` (the smallest
        eigenvalue off the shifts at the final parameters), ``small_min`` (at random points with
        the radius ``circle.noise``), ``large_neg`` (the largest share of random points with
        negative curvature at the larger radii), ``n_params`` and ``shift_dims``.
    """
    check_int("hessian_points", hessian_points, low=1)
    f64 = torch.float64
    C, D = circle.n_classes, circle.dim
    S_basis = shift_basis(C, D)
    n_params = C * (D + 1)
    complement = torch.linalg.eigh(torch.eye(n_params, dtype=f64) - S_basis @ S_basis.T)[1][:, S_basis.shape[1]:]
    g_aug = torch_generator(seed, HESSIAN_AUGMENT)
    hess_rows, flat_err = [], 0.0

    def measure(theta, x, x_aug, teacher):
        nonlocal flat_err
        H = torch.autograd.functional.hessian(lambda th: client_objective(th, x, x_aug, teacher, circle.lam, C, D), theta)
        flat_err = max(flat_err, float((H @ S_basis).abs().max()))
        return float(torch.linalg.eigvalsh(complement.T @ H @ complement).min())

    for setting, res in runs.items():
        xU = res.public.x.double()
        x_aug = xU + circle.noise * torch.randn(xU.shape, generator=g_aug, dtype=f64)
        for model, teacher in res.hessian_points:
            theta = torch.cat([model.head.weight.detach().double().flatten(), model.head.bias.detach().double()])
            hess_rows.append({"where": f"{setting}: final client parameters", "radius": circle.noise,
                              "min eigenvalue": measure(theta, xU, x_aug, teacher)})
    rng = numpy_rng(seed, HESSIAN_POINTS)
    teacher = torch.softmax(torch.tensor(rng.normal(size=(len(xU), C)) * 2), 1)
    for radius in (circle.noise, 1.0, 3.0):
        x_aug = xU + radius * torch.randn(xU.shape, generator=g_aug, dtype=f64)
        for _ in range(hessian_points):
            theta = torch.tensor(rng.normal(size=n_params) * rng.uniform(0.1, 5.0))
            hess_rows.append({"where": "random parameters", "radius": radius, "min eigenvalue": measure(theta, xU, x_aug, teacher)})
    hess = pd.DataFrame(hess_rows).groupby(["where", "radius"], sort=False).agg(
        points=("min eigenvalue", "size"), **{"smallest eigenvalue off the shift directions": ("min eigenvalue", "min"),
                                              "share of points with negative curvature": ("min eigenvalue", lambda v: float((v < -1e-9).mean()))})
    final_min = float(hess.loc[[i for i in hess.index if i[0] != "random parameters"], "smallest eigenvalue off the shift directions"].min())
    small_min = float(hess.loc[("random parameters", circle.noise)]["smallest eigenvalue off the shift directions"])
    large_neg = float(hess.loc[[i for i in hess.index if i[0] == "random parameters" and i[1] > circle.noise],
                               "share of points with negative curvature"].max())
    return dict(table=hess, flat_err=flat_err, final_min=final_min, small_min=small_min, large_neg=large_neg,
                n_params=n_params, shift_dims=int(S_basis.shape[1]))


# ---- the chapter's section 3: its checks recorded, the numbers its prose reads, its figure ----------

def synthetic_section(checks: CheckTable, runs: Mapping[str, SyntheticRun], controls: Mapping[str, SyntheticRun], *,
                      circle: Circle, n_clients: int, rounds: int, n_eval: int,
                      more_seeds: Mapping[int, tuple[Mapping[str, SyntheticRun], Mapping[str, SyntheticRun]]] | None = None
                      ) -> tuple[dict, object]:
    """What the synthetic runs say of Theorems 5.11-5.12 (:func:`theory_table` of ``runs`` and
    their ``controls``), three rows per setting recorded in ``checks`` (Assumption 5.8 with the
    necessary condition, the contraction against the control, and :math:`\\kappa_2`'s lower bound).
    The contraction row is decided over the seed of ``runs`` and those of ``more_seeds`` (each
    seed's runs and controls, by setting) by :func:`contraction_verdict`; the sentence
    ``sy_contraction_sentence`` gives each setting's per-seed ratios' interval.

    Returns
    -------
    (dict, Table)
        The numbers the prose reads (the setting's constants ``sy_radius``, ``sy_wd``,
        ``sy_noise``, ``sy_lam``, ``sy_lam_c`` (the :math:`c` whose :math:`\\lambda = 2c/(c+1)`
        is ``circle.lam``), ``sy_clients``, ``sy_alpha``, ``sy_pool_pct``, ``sy_n_eval``, ``sy_rounds``; the
        sentences ``sy_sentences``, one per setting with its measurements, and
        ``sy_groups_sentence``, the label groups' teachers' largest error where that setting
        runs), and the table of :func:`theory_table` (:func:`fedbook.page.show_table`).
    """
    theory = theory_table(runs, controls)
    seeds = [None, *(more_seeds or {})]
    contractions, contraction_text = {}, []
    for setting in runs:
        tables = [theory] + [theory_table({setting: r[setting]}, {setting: c[setting]}) for r, c in (more_seeds or {}).values()]
        ratios = [(t.loc[setting, "fitted ratio of R† − Bayes"], t.loc[setting, "fitted ratio without the teacher"]) for t in tables]
        ratios = [(None if a is None or pd.isna(a) else float(a), None if b is None or pd.isna(b) else float(b)) for a, b in ratios]
        contractions[setting] = iv, verdict, n_pairs = contraction_verdict([a for a, _ in ratios], [b for _, b in ratios])
        contraction_text.append(
            f"*{setting}*: over {len(seeds)} seeds ({n_pairs} with both ratios), COSMOS's fitted ratio of the excess minus the "
            f"control's is {'not estimable' if iv is None else iv.format(3)} (95 %): "
            + {"holds": "COSMOS contracts faster.", "opposite": "the control contracts faster.",
               "inconclusive": "the seeds do not decide which contracts faster."}[verdict])
    numbers = {f"sy_{key}": float(value) for key, value in dict(
        radius=circle.radius, wd=circle.weight_decay, noise=circle.noise, lam=circle.lam, lam_c=circle.lam / (2 - circle.lam)).items()}
    numbers.update(sy_clients=int(n_clients), sy_alpha=SKEW_ALPHA, sy_pool_pct=100 * circle.pool, sy_n_eval=f"{n_eval:,}", sy_rounds=int(rounds))
    sentences = []
    for setting, row in theory.iterrows():
        ratio, ratio_ex = row["fitted ratio of R†"], row["fitted ratio of R† − Bayes"]
        sentences.append(
            f"*{setting}*: w1 = {format_number(row['w1'], '.2f')} and w2 = {format_number(row['w2'], '.2f')} (Monte Carlo over "
            f"the sampled region: {format_number(row['w1 (Monte Carlo)'], '.3g')} and "
            f"{format_number(row['w2 (Monte Carlo)'], '.3g')}), b̄ = {row['b̄']:.3f}, "
            + ("so Assumption 5.8 holds" if row["b̄ ≤ 1/3 (Ass. 5.8)"] else "so Assumption 5.8 (b̄ ≤ 1/3) fails")
            + (" and the necessary condition 1/b̄ > 2w1w2 + 1 holds; " if row["1/b̄ > 2w1w2 + 1"] else
               " and the necessary condition 1/b̄ > 2w1w2 + 1 fails; ")
            + f"κ2 is at least {format_number(row['κ2 ≥'])}"
            + (", so κ2 < 1 is possible if the unmeasurable c̄ is large enough. " if row["κ2 ≥"] < 1 else
               ", so the theorems' rate cannot be below 1 here. ")
            + f"Over {rounds} iterations the personalization risk goes from {row['R† first']:.4f} to "
            f"{row['R† last']:.4f} (Bayes risk {row['Bayes risk']:.4f}, local training alone {row['local only']:.4f}): a fitted "
            f"per-iteration ratio of {format_number(ratio)} for the risk and {format_number(ratio_ex)} for its excess over the "
            f"Bayes risk, against {format_number(row['fitted ratio without the teacher'])} for the excess when the cluster "
            "teacher is never sent back.")
    numbers["sy_sentences"] = " ".join(sentences)
    numbers["sy_contraction_sentence"] = " ".join(contraction_text)
    numbers["sy_seeds"] = len(seeds)
    if "label groups" in runs:
        numbers["sy_groups_sentence"] = (
            "Under label groups a client that lacks a class has w2 = ∞, and the cluster teachers, "
            "trained on their group's pseudo-labels, misclassify the other group's classes: their largest error on Q is "
            f"{float(runs['label groups'].frame['b̄ on Q'].max()):.3f}. With full-support distributions Q_i = Q, so under label "
            "skew Assumption 5.8 asks the teachers to be right on classes their clients barely hold, which those "
            "clients' pseudo-labels cannot teach.")
    else:
        numbers["sy_groups_sentence"] = "(The label-group federation runs at the book and paper profiles.)"
    for setting, row in theory.iterrows():
        checks.add(f"{setting}: Assumption 5.8 (b̄ ≤ 1/3) and the necessary condition 1/b̄ > 2 w1 w2 + 1",
                   f"{n_clients} linear clients, {rounds} iterations, errors on {n_eval:,} fresh samples",
                   f"b̄ = {row['b̄']:.3f}, w1 w2 = {format_number(row['w1'] * row['w2'], '.2f')}",
                   ok=bool(row["b̄ ≤ 1/3 (Ass. 5.8)"] and row["1/b̄ > 2w1w2 + 1"]))
        iv, verdict, n_pairs = contractions[setting]
        checks.add(f"{setting}: the personalization risk's excess over the Bayes risk contracts faster with the cluster teacher "
                   "than without it (the control: the same federation, the teacher never sent back)",
                   f"least squares on log(R† − Bayes) over {rounds} iterations, COSMOS's ratio minus the control's, "
                   f"{len(seeds)} seeds, 95 % interval below 0",
                   f"{'no interval' if iv is None else iv.format(3)}: {verdict}", ok=verdict == "holds")
        checks.add(f"{setting}: κ2's measured lower bound 4 w1 w2 / (1/b̄ − 1)² is below 1, so the theorems' contraction "
                   "rate can be below 1 here (a bound of 1 or more rules it out whatever the unmeasurable c̄)",
                   f"w1, w2 on the sampled region and b̄ on {n_eval:,} fresh samples", f"κ2 ≥ {format_number(row['κ2 ≥'])}",
                   ok=kappa2_can_contract(row["κ2 ≥"]))
    table = show_table(theory.drop(columns=["R† first", "R† last"]), digits=3,
                       formats={"w2": lambda v: format_number(v, ".2f"), "κ2 ≥": lambda v: format_number(v, ".3g"),
                                "κ2 ≥ (Monte Carlo w)": lambda v: format_number(v, ".3g"),
                                "fitted ratio of R†": format_number, "fitted ratio of R† − Bayes": format_number,
                                "fitted ratio without the teacher": format_number})
    return numbers, table


def contraction_verdict(cosmos: Sequence[float | None], control: Sequence[float | None], level: float = 0.95
                        ) -> tuple[Interval | None, str, int]:
    """The contraction check over seeds: COSMOS's fitted ratio of :math:`R^\\dagger` − Bayes minus
    the control's, per seed, as a paired interval (:func:`fedbook.intervals.paired_interval`);
    ``"holds"`` when the interval lies below 0 (COSMOS contracts faster), ``"opposite"`` when it
    lies above, ``"inconclusive"`` otherwise or with fewer than two seeds where both ratios exist
    (a seed whose excess reaches 0 has no fitted ratio and is left out).

    Returns
    -------
    (Interval or None, str, int)
        The interval (None under two seeds), the verdict and the seeds it rests on.

    Examples
    --------
    >>> iv, verdict, n = contraction_verdict([0.5, 0.6, 0.55, None], [0.9, 0.95, 0.92, 0.9])
    >>> verdict, n, iv.high < 0
    ('holds', 3, True)
    >>> contraction_verdict([0.5, 0.9, 0.7], [0.6, 0.8, 0.7])[1], contraction_verdict([0.5], [0.9])[1:]
    ('inconclusive', ('inconclusive', 1))
    """
    pairs = [(a, b) for a, b in zip(cosmos, control, strict=True) if a is not None and b is not None]
    if len(pairs) < 2:
        return None, "inconclusive", len(pairs)
    iv = paired_interval([a for a, _ in pairs], [b for _, b in pairs], level)
    return iv, "holds" if iv.high < 0 else "opposite" if iv.low > 0 else "inconclusive", len(pairs)


def kappa2_can_contract(kappa2_low: float) -> bool:
    """Whether a measured lower bound on Theorem 5.11's :math:`\\kappa_2` leaves room for a rate
    below 1: finite and below 1 (``inf`` or NaN, e.g. :math:`w_2 = \\infty` when a client lacks a
    class, rule it out).

    Examples
    --------
    >>> kappa2_can_contract(0.4), kappa2_can_contract(1.0), kappa2_can_contract(float("inf"))
    (True, False, False)
    """
    return kappa2_low is not None and bool(np.isfinite(kappa2_low) and kappa2_low < 1)


def plot_risks(runs: Mapping[str, SyntheticRun]):
    """One panel per setting of ``runs``: the personalization risk of the cluster models and the
    clients' own models' mean risk per iteration, the mean Bayes risk (dotted) and local training
    alone (dashed), one legend below. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.2), squeeze=False)
    for ax, (setting, res) in zip(axes[0], runs.items()):
        f = res.frame
        ax.plot(f.index, f["R†(h)"], "-", color="tab:blue", label="R† (cluster models)")
        ax.plot(f.index, f["mean R(f_i^(t,1))"], "o-", ms=3, color="tab:orange", label="clients' own models")
        ax.axhline(res.bayes, ls=":", color="black", label="Bayes risk")
        ax.axhline(res.local, ls="--", color="grey", label="local training alone")
        ax.set_title(setting)
        ax.set_xlabel("iteration t")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].set_ylabel("risk on D_i")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def hessian_section(checks: CheckTable, runs: Mapping[str, SyntheticRun], *, seed: int, hessian_points: int,
                    circle: Circle = Circle()) -> tuple[dict, object]:
    """Definition 5.4 for a linear client: :func:`hessian_checks`, its three rows recorded in
    ``checks``. Returns the numbers the prose reads (``sy_n_params``, ``sy_h_points``,
    ``sy_flat``, ``sy_shift_dims``, ``sy_final_min``, ``sy_small_min``, ``sy_large_neg_pct``) and
    its table (:func:`fedbook.page.show_table`)."""
    H = hessian_checks(runs, seed=seed, hessian_points=hessian_points, circle=circle)
    flat_err, final_min, large_neg = H["flat_err"], H["final_min"], H["large_neg"]
    checks.add("without the ridge a linear softmax client's objective is flat along the D + 1 logit-shift directions (μ = 0)",
               "Hessian of F̂ times the shift basis, every point evaluated", flat_err, 1e-10)
    checks.add("at the clients' final parameters F̂ is convex off the shift directions (so μ = the ridge weight)",
               "smallest Hessian eigenvalue on the complement", format_small(final_min, 2), ok=final_min > -1e-9)
    checks.add("the paper's two-sided consistency term keeps F̂ convex for larger augmentation radii",
               f"{hessian_points} random parameter points per radius 1 and 3",
               f"negative curvature at {100 * large_neg:.0f} % of them", ok=large_neg == 0)
    numbers = {"sy_n_params": int(H["n_params"]), "sy_h_points": int(hessian_points), "sy_flat": float(flat_err),
               "sy_shift_dims": int(H["shift_dims"]), "sy_final_min": final_min, "sy_small_min": float(H["small_min"]),
               "sy_large_neg_pct": 100 * large_neg}
    return numbers, show_table(H["table"], digits={"smallest eigenvalue off the shift directions": 4,
                                                   "share of points with negative curvature": 2})


__all__ = ["DATA", "EVALUATION", "HESSIAN_AUGMENT", "HESSIAN_POINTS", "LOCAL", "SETTINGS", "SKEW_ALPHA", "Circle", "Linear", "SyntheticRun",
           "WithoutTeacher",
           "client_objective", "contraction_verdict", "error_rate", "fitted_ratio", "hessian_checks", "hessian_section", "kappa2_can_contract",
           "linear_from", "plot_risks",
           "shift_basis", "synthetic_run", "synthetic_section", "theory_table"]
