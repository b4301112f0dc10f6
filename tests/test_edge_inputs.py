"""Inputs refused at the public edge, each with the bad value and the valid ones (the probes of
the security review): nothing truncated, nothing accepted that fails later with another message."""

from __future__ import annotations

import math

import pytest

from fedlib.algorithms.hdcfl import HDCConfig
from fedbook.page import check_injected, resolve
from fedlib.data import make_gaussian_mixture
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.protocol import Event


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(rounds=2.5), r"^rounds must be an int >= 0, got 2\.5$"),
    (dict(rounds=-1), r"^rounds must be an int >= 0, got -1$"),
    (dict(eval_every=1.5), r"^eval_every must be an int >= 0, got 1\.5$"),
    (dict(seed=1.7), r"^seed must be an int >= 0 and <= 4294967295, got 1\.7$"),
    (dict(seed=2**32), r"^seed must be an int >= 0 and <= 4294967295, got 4294967296$"),
    (dict(participation=math.nan), r"^participation must be a finite number > 0\.0 and <= 1\.0, got nan$"),
    (dict(rare_ratio=1.5), r"^rare_ratio must be a finite number >= 0\.0 and <= 1\.0, got 1\.5$"),
    (dict(f1_class=-1), r"^f1_class must be an int >= 0, got -1$"),
    (dict(evaluate_last=1), r"^evaluate_last must be True or False, got 1$"),
    (dict(events=((3, 0, "leave"),)), r"^events must be fedlib\.protocol\.Event objects .*got \(3, 0, 'leave'\)"),
    (dict(events="leave"), r"^events must be a sequence of fedlib\.protocol\.Event, got 'leave'$"),
])
def test_the_loop_config_refuses_what_it_would_truncate_or_misread(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LoopConfig(**kwargs)


def test_an_event_refuses_a_fractional_round_and_a_negative_client():
    with pytest.raises(ValueError, match=r"event round must be an int >= 1 .*got 2\.5"):
        Event(2.5, 0)
    with pytest.raises(ValueError, match=r"event client must be an int >= 0 .*got -1"):
        Event(2, -1)
    assert LoopConfig(events=[Event(2, 0)]).events == (Event(2, 0),)  # a list is a sequence of events


@pytest.mark.parametrize("field", ["temperature", "max_drift"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_hdc_config_refuses_nan_and_infinity_it_says_must_be_finite(field, value):
    with pytest.raises(ValueError, match=rf"{field}.* must be a finite number"):
        HDCConfig(**{field: value})


def test_a_federation_whose_clients_get_no_training_sample_is_refused_naming_them():
    ds = make_gaussian_mixture(n_per_class=40, n_classes=3, dim=2, seed=0).dataset
    with pytest.raises(ValueError, match=r"clients \[0, 2, 4, 5, 7\] have no training sample .*raise min_size "
                                         r"\(valid: >= 1"):
        make_federation(ds, n_clients=8, alpha=0.01, min_size=0, global_test_per_class=10)


PROFILES = {"book": {"rounds": 20, "lr": 0.05, "alphas": [0.3, 0.1], "methods": ["fedavg"], "seed": 0}}


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(lr=math.nan), r"^parameter 'lr' must be a finite number \(profile 'book' has 0\.05\), got nan$"),
    (dict(rounds=-5), r"^parameter 'rounds' must be >= 0 \(profile 'book' has 20\), got -5$"),
    (dict(alphas=[0.5, "x"]), r"^parameter 'alphas\[1\]' must be a number \(profile 'book' has 0\.3\), got 'x'; every item"),
    (dict(alphas=[math.inf]), r"^parameter 'alphas\[0\]' must be a finite number"),
    (dict(methods=["fedavg", 3]), r"^parameter 'methods\[1\]' must be a string"),
])
def test_resolve_refuses_non_finite_negative_and_unchecked_list_items(kwargs, message):
    with pytest.raises(ValueError, match=message):
        resolve(PROFILES, "book", **kwargs)


def test_resolve_keeps_valid_overrides():
    P = resolve(PROFILES, "book", rounds=5, alphas=[0.5], seed=3)
    assert (P.rounds, P.alphas, P.seed, P.lr) == (5, [0.5], 3, 0.05)


def test_check_injected_reads_names_unpacked_from_a_tuple():
    check_injected(["", "profile, seed = 'book', 0", "# Parameters\nprofile, seed = 'smoke', 1\n"])
    check_injected(["", "profile = 'book'\nseed = 0", "# Parameters\nprofile, seed = 'smoke', 1\n"])
    with pytest.raises(ValueError, match="unknown parameter.*sede; valid: profile, seed"):
        check_injected(["", "profile, seed = 'book', 0", "# Parameters\nprofile, sede = 'smoke', 1\n"])


def test_events_given_as_a_generator_are_kept():
    cfg = LoopConfig(events=(Event(2, k) for k in range(2)))
    assert cfg.events == (Event(2, 0), Event(2, 1))


def test_a_fingerprint_covers_a_partials_arguments_and_a_closures_values():
    import functools

    from fedlib.loop import algorithm_configuration
    from fedlib.models import build_model

    small, big = (functools.partial(build_model, "mlp", hidden=(h,)) for h in (8, 16))
    assert algorithm_configuration(small) != algorithm_configuration(big)

    def scaled(k):
        return lambda x: x * k

    assert algorithm_configuration(scaled(2)) != algorithm_configuration(scaled(3))
    deep = []
    for _ in range(20):
        deep = [deep]
    with pytest.raises(ValueError, match="nests deeper than 16 levels"):
        algorithm_configuration(deep)
