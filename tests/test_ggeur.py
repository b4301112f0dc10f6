"""GGEUR and its baselines as plug-ins of the one loop; FedProx, FedProto; the frozen encoders."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedlib.algorithms import ALGORITHMS, FedAvg, FedFAStyle, FedMixStyle, FedProto, FedProx, GGEUR, make_algorithm
from fedlib.algorithms.ggeur import CACHE, KNOW, LinearClassifier, Rebalanced, classifier_fn
from fedlib.data import ArrayDataset, make_gaussian_mixture
from fedlib.encoders import (FrozenEncoder, OpenCLIPEncoder, encode_dataset, public_split, standardize_images,
                             train_public_encoder)
from fedlib.federation import ClientData, Federation, make_federation
from fedlib.geometry import GeometricShapes, class_shapes
from fedlib.loop import LoopConfig
from fedlib.run import run_federated
from fedlib.stats import ClassMoments
from fedlib.training import TrainConfig

TC = TrainConfig(epochs=1, batch_size=32, optimizer="adam", lr=1e-2)


@pytest.fixture(scope="module")
def fed():
    ds = make_gaussian_mixture(n_per_class=50, n_classes=4, dim=5, seed=0).dataset
    return make_federation(ds, n_clients=3, alpha=0.5, global_test_per_class=8, seed=0)


def _run(alg, fed, rounds=3, kind="linear", **cfg):
    return run_federated(alg, fed, classifier_fn(kind, fed.clients[0].train.x.shape[1], fed.n_classes),
                         LoopConfig(rounds=rounds, seed=0, **cfg))


def test_registry_names():
    for name in ("fedprox", "fedproto", "ggeur", "fedfa_style", "fedmix_style"):
        assert name in ALGORITHMS
    assert make_algorithm("ggeur", total_per_class=10).name == "fedavg+ggeur[code]"


def test_ggeur_server_shapes_equal_pooled_data_and_cache_stays_on_client(fed):
    alg = GGEUR(base=FedAvg(train=TC), total_per_class=40)
    run = _run(alg, fed)
    x = torch.cat([c.train.x for c in fed.clients]); y = torch.cat([c.train.y for c in fed.clients])
    ref = class_shapes(ClassMoments.from_features(x, y, fed.n_classes))
    got = GeometricShapes.from_arrays(run.server.arrays, KNOW)
    torch.testing.assert_close(got.covariances(), ref.covariances(), atol=1e-9, rtol=0)
    assert not any(k.startswith(CACHE) for k in run.server.arrays)
    led = run.ledger.to_frame()
    assert set(led[(led["round"] == 1) & (led["direction"] == "up")]["kind"]) == {"statistics"}
    assert (led["kind"].str.contains("knowledge") & (led["round"] != 2)).sum() == 0
    for k, c in enumerate(fed.clients):
        st = run.client_states[k]
        ya = st.arrays[CACHE + "y"]
        counts = torch.bincount(ya, minlength=fed.n_classes)
        held = torch.bincount(c.train.y, minlength=fed.n_classes)
        assert bool((counts[held > 0] == torch.clamp(held[held > 0], min=40)).all())
        assert bool((counts[held == 0] == 0).all())
        torch.testing.assert_close(st.arrays[CACHE + "x"][: len(c.train)], c.train.x)


def test_ggeur_is_deterministic_and_formula_matters(fed):
    a = _run(GGEUR(base=FedAvg(train=TC), total_per_class=30), fed)
    b = _run(GGEUR(base=FedAvg(train=TC), total_per_class=30), fed)
    p = _run(GGEUR(base=FedAvg(train=TC), total_per_class=30, formula="paper"), fed)
    for k in a.server.arrays:
        assert torch.equal(a.server.arrays[k], b.server.arrays[k])
    assert not torch.equal(a.client_states[0].arrays[CACHE + "x"], p.client_states[0].arrays[CACHE + "x"])


def test_step2_adds_other_clients_classes():
    rng = np.random.default_rng(0)
    d, C = 4, 3
    def part(classes, shift):
        y = torch.tensor(np.repeat(classes, 8)); x = torch.tensor(rng.normal(size=(len(y), d)) + shift, dtype=torch.float32)
        return ArrayDataset(x, y, C, "toy")
    clients = [ClientData(part([0, 1], 0.0), part([0, 1], 0.0)), ClientData(part([1, 2], 3.0), part([1, 2], 3.0))]
    fed = Federation(clients, part([0, 1, 2], 0.0), C, {"toy": True})
    run = _run(GGEUR(base=FedAvg(train=TC), total_per_class=10, cross_domain=True, per_prototype=5), fed, rounds=2)
    y0 = run.client_states[0].arrays[CACHE + "y"]
    assert int((y0 == 2).sum()) == 5 and int((y0 == 1).sum()) == 10 + 5
    assert bool(torch.isfinite(run.client_states[0].arrays[CACHE + "x"]).all())


def test_partial_participation_is_refused_with_a_clear_message(fed):
    with pytest.raises(ValueError, match="full participation"):
        _run(GGEUR(base=FedAvg(train=TC), total_per_class=10), fed, rounds=4, participation=0.34)


def test_bad_parameters():
    with pytest.raises(ValueError, match="unknown formula 'eigen'"):
        GGEUR(formula="eigen")
    with pytest.raises(ValueError, match="total_per_class"):
        GGEUR(total_per_class=-1)
    with pytest.raises(ValueError, match="mu must be"):
        FedProx(mu=-1.0)
    with pytest.raises(ValueError, match="unknown classifier"):
        classifier_fn("svm", 3, 2)
    with pytest.raises(ValueError, match="lam must be"):
        FedMixStyle(lam=1.0)


def test_fedprox_with_mu_zero_is_fedavg(fed):
    a = _run(FedAvg(train=TC), fed)
    b = _run(FedProx(train=TC, mu=0.0), fed)
    for k in a.server.arrays:
        torch.testing.assert_close(a.server.arrays[k], b.server.arrays[k])
    c = _run(FedProx(train=TC, mu=10.0), fed)
    assert any(not torch.allclose(a.server.arrays[k], c.server.arrays[k]) for k in a.server.arrays)


def test_fedproto_global_prototypes_are_count_weighted_means(fed):
    run = _run(FedProto(train=TC), fed, rounds=2, kind="mlp")
    glob = run.server.arrays["proto/global"]
    assert glob.shape == (fed.n_classes, 128) and bool(torch.isfinite(glob).all())
    assert run.server.arrays["proto/mask"].sum() == fed.n_classes


@pytest.mark.parametrize("alg", [
    GGEUR(base=FedProx(train=TC, mu=0.1), total_per_class=20),
    GGEUR(base=FedProto(train=TC), total_per_class=20, formula="paper"),
    FedFAStyle(base=FedAvg(train=TC), total_per_class=20),
    FedMixStyle(train=TC, mix_batch=4),
])
def test_composed_methods_run_and_stay_finite(alg, fed):
    run = _run(alg, fed, rounds=3, kind="mlp")
    assert np.isfinite(run.summary()["global"])


def test_fedfa_style_fills_held_classes(fed):
    run = _run(FedFAStyle(base=FedAvg(train=TC), total_per_class=25), fed, rounds=2)
    ya = run.client_states[0].arrays[CACHE + "y"]
    held = torch.bincount(fed.clients[0].train.y, minlength=fed.n_classes)
    assert bool((torch.bincount(ya, minlength=fed.n_classes)[held > 0] >= 25).all())


def test_rebalanced_control_has_ggeurs_class_counts_and_only_real_samples(fed):
    """The rebalancing-only control: GGEUR's step-1 set size and class counts exactly, made of copies."""
    g = _run(GGEUR(base=FedAvg(train=TC), total_per_class=40), fed, rounds=2)
    r = _run(Rebalanced(base=FedAvg(train=TC), total_per_class=40), fed, rounds=2)
    led = r.ledger.to_frame()
    assert set(led[(led["round"] == 1) & (led["direction"] == "up")]["kind"]) == {"statistics"}
    for k, c in enumerate(fed.clients):
        yr, yg = r.client_states[k].arrays[CACHE + "y"], g.client_states[k].arrays[CACHE + "y"]
        assert torch.equal(torch.bincount(yr, minlength=fed.n_classes), torch.bincount(yg, minlength=fed.n_classes))
        xr = r.client_states[k].arrays[CACHE + "x"]
        # every row is one of the client's real samples, of its own class
        match = (xr[:, None, :] == c.train.x[None, :, :]).all(-1)
        assert bool(match.any(1).all())
        assert bool((c.train.y[match.float().argmax(1)] == yr).all())
    again = _run(Rebalanced(base=FedAvg(train=TC), total_per_class=40), fed, rounds=2)
    torch.testing.assert_close(again.client_states[0].arrays[CACHE + "x"], r.client_states[0].arrays[CACHE + "x"])
    with pytest.raises(ValueError, match="total_per_class"):
        Rebalanced(total_per_class=-1)


def test_linear_classifier_interface():
    m = LinearClassifier(6, 3)
    assert m.embed(torch.ones(2, 6)).shape == (2, 6) and m(torch.ones(2, 6)).shape == (2, 3)
    assert [n for n, _ in m.named_parameters()] == ["head.weight", "head.bias"]


def test_public_split_disjoint_and_stratified():
    ds = make_gaussian_mixture(n_per_class=20, n_classes=3, dim=2, seed=1).dataset
    pub, rest = public_split(ds, 0.25, seed=0)
    assert len(np.intersect1d(pub, rest)) == 0 and len(pub) + len(rest) == len(ds)
    assert np.bincount(ds.labels_np[pub]).tolist() == [5, 5, 5]
    with pytest.raises(ValueError, match="fraction"):
        public_split(ds, 1.5)


def test_public_encoder_is_frozen_and_deterministic():
    g = torch.Generator().manual_seed(0)
    ds = ArrayDataset(torch.rand(40, 1, 12, 12, generator=g), torch.arange(40) % 4, 4, "img")
    e1 = train_public_encoder(ds, epochs=1, feature_dim=16, width=8, seed=3)
    e2 = train_public_encoder(ds, epochs=1, feature_dim=16, width=8, seed=3)
    assert all(not p.requires_grad for p in e1.module.parameters())
    z = e1.embed(ds.x)
    assert z.shape == (40, 16) and torch.equal(z, e2.embed(ds.x))
    emb = encode_dataset(e1, ds)
    assert emb.x.shape == (40, 16) and torch.equal(emb.y, ds.y)
    assert not z.requires_grad


def test_standardize_images_by_hand():
    """Pixels (0, 1, 0, 1): mean 1/2, standard deviation 1/2, so (-1, 1, -1, 1); the inverted image 1 - x is its negative;
    a constant image becomes 0."""
    x = torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]], [[[0.3, 0.3], [0.3, 0.3]]]])
    z = standardize_images(x)
    assert z.shape == x.shape and z[0].flatten().tolist() == [-1.0, 1.0, -1.0, 1.0]
    assert torch.allclose(standardize_images(1 - x)[0], -z[0]) and z[1].abs().max() < 1e-5
    with pytest.raises(ValueError, match=r"batch of images of shape \(n, ...\), got shape \(4,\)"):
        standardize_images(torch.zeros(4))


def test_the_encoder_options_standardize_and_read_before_the_relu():
    """standardize: an image and any shift or positive scaling of it embed alike; features="linear": the ReLU's input, so
    its positive part is the "relu" embedding of the same weights; an unknown option is refused by name."""
    g = torch.Generator().manual_seed(0)
    ds = ArrayDataset(torch.rand(40, 1, 12, 12, generator=g), torch.arange(40) % 4, 4, "img")
    lin = train_public_encoder(ds, epochs=1, feature_dim=16, width=8, seed=3, standardize=True, features="linear")
    relu = train_public_encoder(ds, epochs=1, feature_dim=16, width=8, seed=3, standardize=True)
    z = lin.embed(ds.x)
    assert (z < 0).any() and torch.allclose(relu.embed(ds.x), z.clamp(min=0), atol=1e-6)
    assert torch.allclose(lin.embed(0.5 * ds.x + 0.2), z, atol=1e-4)
    assert "standardized inputs, features before the ReLU" in lin.name
    plain = train_public_encoder(ds, epochs=1, feature_dim=16, width=8, seed=3)
    assert not torch.allclose(plain.embed(0.5 * ds.x + 0.2), plain.embed(ds.x), atol=1e-4)
    with pytest.raises(ValueError, match="unknown encoder features 'gelu'; valid: relu, linear"):
        train_public_encoder(ds, epochs=1, feature_dim=16, width=8, seed=3, features="gelu")


def test_frozen_encoder_checks_output_and_openclip_needs_local_file(tmp_path):
    bad = FrozenEncoder(lambda x: x[:, :2], dim=3, name="bad")
    with pytest.raises(ValueError, match="expected"):
        bad.embed(torch.zeros(4, 5))
    with pytest.raises(ValueError, match="not a local file"):
        OpenCLIPEncoder("ViT-B-32", tmp_path / "missing.bin")


# ------------------------------------------------------------------ the chapter's domain federation and matched steps
def test_one_client_per_domain_is_disjoint_seeded_and_sized():
    from fedlib.federation import one_client_per_domain
    n = 120
    ds = ArrayDataset(torch.randn(n, 4), torch.arange(n) % 5, 5, "toy", domain=torch.arange(n) % 3,
                      domain_names=("a", "b", "c"))
    ds.x[:, 0] = torch.arange(n, dtype=torch.float32)  # a sample's id, to check disjointness
    totals = {"a": 50, "b": 50, "c": 50}  # the full domains were larger (a public part is gone)
    fed, sizes = one_client_per_domain(ds, totals, test_share=0.2, client_share=0.5, seed=3)
    assert fed.n_clients == 3 and fed.n_classes == 5
    ids = [set(c.train.x[:, 0].tolist()) | set(c.test.x[:, 0].tolist()) for c in fed.clients]
    assert all(not (ids[i] & ids[j]) for i in range(3) for j in range(i + 1, 3))
    for d, c in enumerate(fed.clients):
        assert len(c.train) == 25 and len(c.test) == 10
        assert set(c.train.domain.tolist()) == {d} and set(c.test.domain.tolist()) == {d}
        assert not set(c.train.x[:, 0].tolist()) & set(c.test.x[:, 0].tolist())
    assert len(fed.global_test) == 30 and sizes["b"] == {"domain size": 50, "client train": 25, "domain test": 10,
                                                         "classes held": 5}
    again, _ = one_client_per_domain(ds, totals, 0.2, 0.5, seed=3)
    other, _ = one_client_per_domain(ds, totals, 0.2, 0.5, seed=4)
    assert torch.equal(again.clients[0].train.x, fed.clients[0].train.x)
    assert not torch.equal(other.clients[0].train.x, fed.clients[0].train.x)
    with pytest.raises(ValueError):
        one_client_per_domain(ds, {"a": 100, "b": 100, "c": 100}, 0.3, 0.5, seed=0)


def test_matched_steps_follow_ggeur_set_sizes(fed):
    from fedlib.algorithms.ggeur import augmented_size, filled_size, matched_train
    for k, c in enumerate(fed.clients):
        counts = torch.bincount(c.train.y, minlength=fed.n_classes)
        assert filled_size(c.train.y, fed.n_classes, 1000) == 1000 * int((counts > 0).sum())
        assert filled_size(c.train.y, fed.n_classes, 1) == len(c.train)
        assert augmented_size(fed, k, 1, 0) == len(c.train)
    # the matched budget equals the steps GGEUR's Rebalanced/GGEUR clients take per round on average
    sizes = [filled_size(c.train.y, fed.n_classes, 40) for c in fed.clients]
    tc = matched_train(sizes, batch_size=32, local_epochs=2, lr=0.01)
    assert tc.steps == 2 * int(np.ceil(np.mean(sizes) / 32)) and tc.batch_size == 32
