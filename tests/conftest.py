"""Shared fixtures: a tiny federation on a Gaussian mixture that trains in milliseconds, and the
folder the smoke-profile chapters execute into (shared by the notebook tests and the browser
tests, so that each chapter executes once per test session)."""

from __future__ import annotations

import functools
import os

import pytest
import torch
from hypothesis import settings
from threadpoolctl import threadpool_limits

# Property tests draw their examples deterministically (from each test's source), so that a CI run
# is reproducible: a failure found once is found again. Hypothesis still searches ~30-100 cases a test.
settings.register_profile("fedlib", derandomize=True)
settings.load_profile("fedlib")

from fedlib.data import make_gaussian_mixture
from fedlib.federation import make_federation
from fedlib.models import build_model


def require_browser(suite: str, missing: str | None, install: str) -> None:
    """For a module of tests that drive Debian's chromium (the browser and PDF tests): nothing when
    ``missing`` is ``None``, else skip the module and say what to install, except under CI (``CI``
    set), where a missing browser is a failure: ``.ci/run`` installs it first."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the {suite} tests need {missing} and must not skip in CI; install: {install}", pytrace=False)
    pytest.skip(f"the {suite} tests need {missing}; install: {install}", allow_module_level=True)


@pytest.fixture(scope="module")
def one_thread():
    """One torch and one BLAS/OpenMP thread for a module of tiny models and matrices, restored after
    it (on a shared 2-core machine many threads only contend). A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_federation():
    ds = make_gaussian_mixture(n_per_class=60, n_classes=3, dim=16, separation=4.0, seed=0).dataset
    return make_federation(ds, n_clients=4, partition="dirichlet", alpha=0.5, min_size=8,
                           global_test_per_class=10, seed=0)


@pytest.fixture(scope="session")
def tiny_model_fn():
    return functools.partial(build_model, "mlp", in_channels=1, n_classes=3, input_size=4, hidden=(16, 8))


SMOKE_BOOK_GROUP = "smoke_book"
"""The pytest-xdist group of every test that reads the session's smoke build (:func:`smoke_out`)."""


@pytest.hookimpl(trylast=True)  # after xdist's own hook, which reads the marks it can see
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (``make test``: ``-n 2 --dist loadgroup``), put every test that
    uses :func:`smoke_out` (directly or through another fixture, such as the browser tests' rendered
    site) in the xdist group :data:`SMOKE_BOOK_GROUP`, so that they all run in one worker, whose
    session executes each chapter once, as a run without xdist does. Without xdist, or with
    ``-n 0``, it does nothing.

    pytest-xdist groups a test by an ``@group`` suffix of its id, which version 3.8 writes where
    pytest 9.2 no longer reads it (pytest-xdist issue 1386: every group is silently spread over the
    workers); this hook writes the suffix into the id pytest 9.2 reads (``item._id``, a ``NodeId``),
    unless it is there already. A parametrized test's id then carries a stray ``]`` where pytest
    rebuilds it from its parts (the JUnit XML's test names, ``test_x[a]@smoke_book]``): cosmetic."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers under --dist loadgroup
        return
    from _pytest.nodeid import NodeId  # pytest 9.2's structured test ids

    for item in items:
        if "smoke_out" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(SMOKE_BOOK_GROUP))
            if not item.nodeid.endswith(f"@{SMOKE_BOOK_GROUP}"):
                item._id = NodeId.parse(f"{item.nodeid}@{SMOKE_BOOK_GROUP}")


@pytest.fixture(scope="session")
def smoke_out(tmp_path_factory):
    """The ``out`` folder of a smoke-profile build for this session (chapters execute into it once)."""
    return tmp_path_factory.mktemp("smoke_book")
