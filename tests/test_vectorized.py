"""Vectorized clients (``fedlib.engines.vectorized``): equal to the sequential path to float32
rounding, deterministic, bounded in memory, and honest about what it cannot stack."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from fedlib.algorithms import (ALGORITHMS, CGRL, GGEUR, Ditto, FedAvg, FedAvgFT, FedBABU, FedMixStyle, FedProto, FedProx,
                               FedRep, registered)
from fedlib.algorithms.ggeur import classifier_fn
from fedlib.data import make_gaussian_mixture
from fedlib.engines import InProcessTransport
from fedlib.engines.vectorized import (SequentialFallback, VectorizedTransport, activation_numel, check_vectorizable_model, chunk_size,
                                       train_programs)
from fedlib.federation import make_federation
from fedlib.loop import LoopConfig
from fedlib.run import RunOptions
from fedlib.run import run_federated
from fedlib.messages import State
from fedlib.models import build_model
from fedlib.protocol import Algorithm
from fedlib.training import LocalProgram, Phase, TrainConfig

TOL = 1e-6


@pytest.fixture(scope="module")
def ragged():
    """Six clients of very different sizes (Dirichlet 0.3): different numbers of steps and short last batches."""
    ds = make_gaussian_mixture(n_per_class=70, n_classes=4, dim=16, separation=3.0, seed=1).dataset
    fed = make_federation(ds, n_clients=6, partition="dirichlet", alpha=0.3, min_size=3, global_test_per_class=10, seed=2)
    sizes = sorted(len(c.train) for c in fed.clients)
    assert sizes[0] < 16 < sizes[-1] and len(set(sizes)) > 3  # ragged indeed
    return fed


MODEL = functools.partial(build_model, "mlp", in_channels=1, n_classes=4, input_size=4, hidden=(16, 8))
SGD = TrainConfig(epochs=2, batch_size=8, lr=0.05, momentum=0.9)
ADAM = TrainConfig(epochs=2, batch_size=8, optimizer="adam", lr=0.01, weight_decay=1e-3)


def _max_diff(a: State, b: State) -> float:
    assert set(a.arrays) == set(b.arrays)
    return max([float((a.arrays[k].double() - b.arrays[k].double()).abs().max()) for k in a.arrays] or [0.0])


def _assert_close(seq, vec):
    assert _max_diff(seq.server, vec.server) <= TOL
    for k in seq.client_states:
        assert _max_diff(seq.client_states[k], vec.client_states[k]) <= TOL
    fs, fv = seq.frame, vec.frame
    assert fs[["round", "client", "metric"]].equals(fv[["round", "client", "metric"]])
    assert (fs["value"] - fv["value"]).abs().max() <= TOL  # protocol metrics and training losses
    ls, lv = seq.ledger.to_frame(), vec.ledger.to_frame()
    keys = ["round", "client", "direction", "kind"]
    assert ls[keys].equals(lv[keys])  # the same messages, in the same order
    # and the same sizes, but for the digits of the training loss the reply's metadata spells out
    # (the repr of a float: at most 24 characters)
    assert (ls["bytes"] - lv["bytes"]).abs().max() <= 24


@pytest.mark.parametrize("algorithm", [
    FedAvg(train=SGD),
    FedProx(train=ADAM, mu=0.5),
    FedRep(train=SGD, head_train=TrainConfig(epochs=1, batch_size=8, lr=0.05)),  # a head-only phase, then the body
    FedBABU(train=ADAM, finetune=TrainConfig(epochs=1, batch_size=8, lr=0.01)),
    FedAvgFT(train=TrainConfig(steps=5, batch_size=8, lr=0.05, momentum=0.0, weight_decay=1e-2)),
    FedProx(train=TrainConfig(epochs=1, batch_size=8, lr=0.05, momentum=0.9, weight_decay=1e-2), mu=0.1),
    Ditto(train=SGD, personal_train=ADAM, lam=0.5),  # a phase anchored at the message, then the continued program
], ids=lambda a: f"{a.name}-{a.train.optimizer}-wd{a.train.weight_decay}")
def test_vectorized_equals_sequential_on_ragged_clients_and_partial_participation(ragged, algorithm):
    cfg = LoopConfig(rounds=3, participation=0.5, eval_every=1, seed=4)
    seq = run_federated(algorithm, ragged, MODEL, cfg)
    transport = VectorizedTransport(ragged, MODEL, cfg.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing falls back
        vec = run_federated(algorithm, ragged, MODEL, cfg, transport=transport)
    assert transport.stacked_clients == 3 * 3 and not transport.notes
    _assert_close(seq, vec)


def test_a_small_cnn_stacks_too(ragged):
    """Convolutions whose weights differ per client (grouped under vmap), GroupNorm, max-pooling."""
    from fedlib.data import ArrayDataset
    from fedlib.federation import ClientData, Federation

    def image(ds):
        return ArrayDataset(ds.x.reshape(-1, 1, 4, 4), ds.y, ds.n_classes, ds.name)

    fed = Federation([ClientData(image(c.train), image(c.test)) for c in ragged.clients], image(ragged.global_test),
                     ragged.n_classes, ragged.description)
    cnn = functools.partial(build_model, "cnn", in_channels=1, n_classes=4, input_size=4, width=8, feature_dim=16)
    cfg = LoopConfig(rounds=2, participation=0.5, seed=3)
    algorithm = FedAvg(train=TrainConfig(epochs=1, batch_size=8, lr=0.05, momentum=0.9))
    transport = VectorizedTransport(fed, cnn, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to sequential training would be an error here
        vec = run_federated(algorithm, fed, cnn, cfg, transport=transport)
    # every sampled client of both rounds (half of six) was trained stacked, none alone
    assert transport.stacked_clients == 2 * 3 and not transport.notes
    _assert_close(run_federated(algorithm, fed, cnn, cfg), vec)


class _PartlyFrozen(torch.nn.Module):
    """An MLP with a frozen first layer and a parameter the loss never reaches."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(16, 8)
        self.body.weight.requires_grad_(False)
        self.unused = torch.nn.Parameter(torch.ones(3))
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.relu(self.body(x.flatten(1))))


def test_frozen_and_unused_parameters_are_left_as_torch_optim_leaves_them(ragged):
    cfg = LoopConfig(rounds=2, seed=6)
    algorithm = FedAvg(train=TrainConfig(epochs=1, batch_size=8, lr=0.05, momentum=0.9, weight_decay=1e-2))
    seq = run_federated(algorithm, ragged, _PartlyFrozen, cfg)
    vec = run_federated(algorithm, ragged, _PartlyFrozen, cfg, transport=VectorizedTransport(ragged, _PartlyFrozen, 6))
    _assert_close(seq, vec)
    start = VectorizedTransport(ragged, _PartlyFrozen, 6).initial_model
    for res in (seq, vec):  # neither trained nor decayed
        assert torch.equal(res.server.arrays["model/body.weight"], start.body.weight)
        assert torch.equal(res.server.arrays["model/unused"], start.unused)


def test_run_options_execution_builds_the_vectorized_transport(ragged):
    cfg = LoopConfig(rounds=2, participation=0.5, seed=4)
    a = run_federated(FedAvg(train=SGD), ragged, MODEL, cfg, RunOptions(execution="vectorized"))
    b = run_federated(FedAvg(train=SGD), ragged, MODEL, cfg, transport=VectorizedTransport(ragged, MODEL, 4))
    for k in a.server.arrays:  # the same transport, the same bits
        assert torch.equal(a.server.arrays[k], b.server.arrays[k])


def test_vectorized_is_deterministic_and_chunks_change_nothing_beyond_rounding(ragged):
    cfg, vectorized = LoopConfig(rounds=2, seed=5), RunOptions(execution="vectorized")
    a = run_federated(FedProx(train=SGD, mu=0.1), ragged, MODEL, cfg, vectorized)
    b = run_federated(FedProx(train=SGD, mu=0.1), ragged, MODEL, cfg, vectorized)
    for k in a.server.arrays:
        assert torch.equal(a.server.arrays[k], b.server.arrays[k])
    assert a.frame.equals(b.frame)
    one = VectorizedTransport(ragged, MODEL, 5, memory_budget=1)  # a chunk of one client
    c = run_federated(FedProx(train=SGD, mu=0.1), ragged, MODEL, cfg, transport=one)
    assert one.stacked_clients == 2 * ragged.n_clients
    assert _max_diff(a.server, c.server) <= TOL


def _programs(fed, phases, weights):
    finish = lambda model, loss: ({k: v.clone() for k, v in model.state_dict().items()}, loss)  # noqa: E731
    return [LocalProgram(weights, c.train.x, c.train.y, phases, finish) for c in fed.clients]


def test_train_programs_give_each_client_its_own_sequential_update(ragged):
    weights = {k: v.clone() for k, v in MODEL(seed=0).state_dict().items()}
    # an empty client and a one-sample client next to the others: 0 and 1 steps per epoch
    data = [(c.train.x, c.train.y) for c in ragged.clients] + [(ragged.clients[0].train.x[:0], ragged.clients[0].train.y[:0]),
                                                               (ragged.clients[0].train.x[:1], ragged.clients[0].train.y[:1])]
    phases = (Phase(TrainConfig(epochs=1, batch_size=8, lr=0.1), params="head"), Phase(ADAM, params="body", mu=0.2))
    finish = lambda model, loss: ({k: v.clone() for k, v in model.state_dict().items()}, loss)  # noqa: E731
    programs = [LocalProgram(weights, x, y, phases, finish) for x, y in data]
    seeds = range(10, 10 + len(programs))
    stacked = train_programs(MODEL(), programs, [torch.Generator().manual_seed(s) for s in seeds])
    for program, s, (w, loss) in zip(programs, seeds, stacked):
        ref, ref_loss = program.run(MODEL(), torch.Generator().manual_seed(s))
        assert max(float((ref[k] - w[k]).abs().max()) for k in ref) <= TOL
        if len(program.y):
            assert abs(ref_loss - loss) <= TOL
        else:  # no step: the weights are the start weights and the loss is NaN, as local_train says
            assert all(torch.equal(w[k], weights[k]) for k in weights) and loss != loss and ref_loss != ref_loss


def test_methods_without_programs_fall_back_to_sequential_and_say_so_once(ragged):
    cfg = LoopConfig(rounds=3, seed=1)
    alg = FedProto(train=SGD)
    seq = run_federated(alg, ragged, MODEL, cfg)
    transport = VectorizedTransport(ragged, MODEL, 1)
    with pytest.warns(SequentialFallback, match="fedproto: its local_update is not a LocalProgram") as record:
        vec = run_federated(alg, ragged, MODEL, cfg, transport=transport)
    assert len(record) == 1 and transport.notes == [str(record[0].message)] and transport.stacked_clients == 0
    for k in seq.server.arrays:  # the sequential path itself: the same bits
        assert torch.equal(seq.server.arrays[k], vec.server.arrays[k])


def test_which_methods_are_vectorizable():
    for alg in (FedAvg(), FedAvgFT(), FedProx(), FedRep(), FedBABU(), Ditto(), GGEUR(base=FedAvg(), total_per_class=10)):
        assert alg.capabilities.stacks, alg.name
    for alg in (CGRL(), FedProto(), FedMixStyle()):
        assert not alg.capabilities.stacks, alg.name  # their own losses or control flow; FedMix-style mixes batches
    # ... and a mixin cannot sneak a local_update in either
    class Mixin:
        def local_update(self, ctx, state, message, data, generator): ...

    with pytest.raises(TypeError, match="Sneaky derives from ProgramMethod, whose local_update is final"):
        class Sneaky(Mixin, FedAvg):
            pass
    # stackability is structural: a program method's local_update is the program, and cannot be changed
    with pytest.raises(TypeError, match="Custom derives from ProgramMethod, whose local_update is final"):
        class Custom(FedAvg):
            def local_update(self, ctx, state, message, data, generator):
                return super().local_update(ctx, state, message, data, generator)


def test_a_wrapper_of_a_sequential_base_trains_every_client_alone(ragged):
    """GGEUR around FedProto is a program method whose base does not stack: it says so, nothing
    stacks, and the results are the sequential path's bits."""
    fed = ragged
    alg = GGEUR(base=FedProto(train=SGD), total_per_class=10)
    cfg = LoopConfig(rounds=3, seed=0)
    transport = VectorizedTransport(fed, MODEL, 0)
    with pytest.warns(SequentialFallback, match=r"fedproto\+ggeur\[code\]: some clients have no LocalProgram"):
        vec = run_federated(alg, fed, MODEL, cfg, transport=transport)
    seq = run_federated(alg, fed, MODEL, cfg)
    assert transport.stacked_clients == 0
    assert all(torch.equal(seq.server.arrays[k], vec.server.arrays[k]) for k in seq.server.arrays)


def test_ggeur_stacks_its_classifier_from_the_third_round():
    ds = make_gaussian_mixture(n_per_class=50, n_classes=4, dim=5, seed=0).dataset
    fed = make_federation(ds, n_clients=4, alpha=0.5, global_test_per_class=8, seed=0)
    model_fn = classifier_fn("linear", 5, 4)
    alg = GGEUR(base=FedAvg(train=TrainConfig(epochs=1, batch_size=32, optimizer="adam", lr=1e-2)), total_per_class=30)
    cfg = LoopConfig(rounds=4, seed=0)
    seq = run_federated(alg, fed, model_fn, cfg)
    transport = VectorizedTransport(fed, model_fn, 0)
    with pytest.warns(UserWarning, match=r"some clients have no LocalProgram in some rounds \(the first: client 0 in round 1\)"):
        vec = run_federated(alg, fed, model_fn, cfg, transport=transport)
    assert transport.stacked_clients == 2 * fed.n_clients  # rounds 3 and 4; rounds 1-2 exchange statistics
    _assert_close(seq, vec)
    # FedMix-style mixes batches with the generator inside its loss: it has no programs, whatever its wrapper has
    mix = FedMixStyle(base=FedAvg(train=TrainConfig(epochs=1, batch_size=32)))
    transport = VectorizedTransport(fed, model_fn, 0)
    with pytest.warns(SequentialFallback, match="fedmix_style: its local_update is not a LocalProgram"):
        run_federated(mix, fed, model_fn, LoopConfig(rounds=3, seed=0), transport=transport)
    assert transport.stacked_clients == 0


def test_models_the_stack_cannot_reproduce_are_refused(ragged):
    bn = functools.partial(build_model, "cnn", in_channels=1, n_classes=4, input_size=4, width=8, norm="batch")
    with pytest.raises(ValueError, match=r"'conv1.1' \(BatchNorm2d\) normalizes over the batch.*norm='group'"):
        VectorizedTransport(ragged, bn, 0)
    with pytest.raises(ValueError, match=r"'0' \(BatchNorm1d\) normalizes over the batch"):  # batch statistics alone
        check_vectorizable_model(torch.nn.Sequential(torch.nn.BatchNorm1d(2, track_running_stats=False)))
    with pytest.raises(ValueError, match=r"'1' \(Dropout, p=0.5\) draws random numbers"):
        check_vectorizable_model(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)))
    check_vectorizable_model(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0)))  # p = 0 draws nothing
    with pytest.raises(ValueError, match="memory_budget must be a positive number of bytes, got 0"):
        VectorizedTransport(ragged, MODEL, 0, memory_budget=0)


def test_chunk_size_from_the_memory_budget():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    assert activation_numel(model, torch.zeros(1, 3)) == 4 + 4 + 2  # the outputs of the three leaf modules
    params = 3 * 4 + 4 + 4 * 2 + 2
    # float32: parameters x 8 copies, activations of a batch of 10 x 3, and 100 bytes of the client's inputs
    per_client = 4 * (8 * params + 3 * 10 * (4 + 4 + 2)) + 100
    assert chunk_size(model, torch.zeros(1, 3), 10, 7 * per_client, data_bytes=100) == 7
    assert chunk_size(model, torch.zeros(1, 3), 10, 7 * per_client - 1, data_bytes=100) == 6
    assert chunk_size(model, torch.zeros(1, 3), 10, 1) == 1


def test_bad_execution_settings_are_refused():
    with pytest.raises(ValueError, match="unknown execution 'gpu'; valid: sequential, vectorized"):
        RunOptions(execution="gpu")
    with pytest.raises(ValueError, match="memory_budget must be None .* or a positive number of bytes, got -1"):
        RunOptions(memory_budget=-1)
    with pytest.raises(ValueError, match="unknown params 'encoder'; valid: all, head, body"):
        Phase(TrainConfig(), params="encoder")
    with pytest.raises(ValueError, match="mu must be a finite number >= 0, got -0.1"):
        Phase(TrainConfig(), mu=-0.1)


def test_a_checkpoint_covers_stacked_execution_only(ragged, tmp_path):
    data = {"data": ragged.digest()}  # both carry the data's digest; only the stacked one its execution
    assert "execution" not in LoopConfig().fingerprint() and InProcessTransport(ragged, MODEL, 0).fingerprint() == data
    fp = VectorizedTransport(ragged, MODEL, 0, memory_budget=2**20).fingerprint()
    assert fp == {**data, "execution": "vectorized", "memory_budget": 2**20}
    # a run stopped stacked does not resume sequentially (the two differ by float32 rounding)
    options = RunOptions(execution="vectorized", checkpoint=str(tmp_path / "ck.pt"))
    run_federated(FedAvg(train=SGD), ragged, MODEL, LoopConfig(rounds=2), options, stop_after=1)
    with pytest.raises(ValueError, match="different run"):
        run_federated(FedAvg(train=SGD), ragged, MODEL, LoopConfig(rounds=2), RunOptions(checkpoint=options.checkpoint))


def test_in_process_default_is_sequential(ragged):
    # the default transport is the in-process one: RunOptions' default keeps every published number
    from fedlib.run import make_transport
    assert type(make_transport(ragged, MODEL, 0)) is InProcessTransport
    assert type(make_transport(ragged, MODEL, 0, RunOptions(execution="vectorized"))) is VectorizedTransport


def test_programs_run_sequentially_are_the_hand_written_local_updates_bit_for_bit(ragged):
    """The sequential path of a LocalProgram is what FedProx, FedRep and Ditto wrote before they had
    programs: load, local_train (with the proximal term / head then body / the personal model
    proximal to the message's, then the global model), reply."""
    from torch.nn import functional as F

    from fedlib.algorithms.fedrep import PERSONAL, personal_head
    from fedlib.messages import prefixed
    from fedlib.models import HEAD_PREFIX
    from fedlib.protocol import body_arrays, load_model, model_arrays, update_message, without_head
    from fedlib.training import local_train, proximal_term

    class WrittenFedProx(Algorithm):
        def __init__(self, train, mu):
            self.train, self.mu = train, mu

        def local_update(self, ctx, state, message, data, generator):
            model = load_model(ctx.model, message)
            anchor = {name: p.detach().clone() for name, p in model.named_parameters()}
            mu = self.mu

            def loss_fn(m, x, y):
                return F.cross_entropy(m(x), y) + 0.5 * mu * proximal_term(m, anchor)

            loss = local_train(model, data.train.x, data.train.y, self.train, generator, loss_fn=loss_fn)
            return state, update_message(model_arrays(model), len(data.train), loss)

    class WrittenFedRep(Algorithm):
        def __init__(self, train, head_train):
            self.train, self.head_train = train, head_train
            self.deploy = FedRep(train=train, head_train=head_train).deploy  # the personal head with the body

        def local_update(self, ctx, state, message, data, generator):
            model = load_model(ctx.model, State({**without_head(message.arrays), **personal_head(state, message)}))
            x, y = data.train.x, data.train.y
            local_train(model, x, y, self.head_train, generator, params=model.head_parameters())
            loss = local_train(model, x, y, self.train, generator, params=model.body_parameters())
            new_state = State(arrays=prefixed(PERSONAL + HEAD_PREFIX, model.head.state_dict()), meta=dict(state.meta))
            return new_state, update_message(body_arrays(model), len(y), loss)

    class WrittenDitto(Algorithm):
        def __init__(self, train, personal_train, lam):
            self.train, self.personal_train, self.lam = train, personal_train, lam
            self.deploy = Ditto(train=train, personal_train=personal_train, lam=lam).deploy

        def local_update(self, ctx, state, message, data, generator):
            x, y = data.train.x, data.train.y
            own = state.with_prefix("personal/")
            model = load_model(ctx.model, State(prefixed("model/", own)) if own else message)
            anchor = {name: t.detach().clone() for name, t in message.with_prefix("model/").items()}
            lam = self.lam

            def loss_fn(m, xb, yb):
                return F.cross_entropy(m(xb), yb) + 0.5 * lam * proximal_term(m, anchor)

            local_train(model, x, y, self.personal_train, generator, loss_fn=loss_fn)
            new_state = State(arrays=prefixed("personal/", model.state_dict()), meta=dict(state.meta))
            model = load_model(ctx.model, message)
            loss = local_train(model, x, y, self.train, generator)
            return new_state, update_message(model_arrays(model), len(y), loss)

    cfg = LoopConfig(rounds=2, participation=0.5, seed=8)
    for new, old in ((FedProx(train=ADAM, mu=0.3), WrittenFedProx(train=ADAM, mu=0.3)),
                     (FedRep(train=SGD, head_train=SGD), WrittenFedRep(train=SGD, head_train=SGD)),
                     (Ditto(train=SGD, personal_train=ADAM, lam=0.3), WrittenDitto(train=SGD, personal_train=ADAM, lam=0.3))):
        a, b = run_federated(new, ragged, MODEL, cfg), run_federated(old, ragged, MODEL, cfg)
        assert all(torch.equal(a.server.arrays[k], b.server.arrays[k]) for k in b.server.arrays)
        assert all(torch.equal(a.client_states[c].arrays[k], b.client_states[c].arrays[k])
                   for c in b.client_states for k in b.client_states[c].arrays)
        assert a.frame.equals(b.frame)


def test_the_registered_methods_that_stack_and_stream_are_read_off_their_classes():
    built = {}
    for name, cls in ALGORITHMS.items():  # what a bare build says, as the performance chapter once computed it
        try:
            built[name] = cls()
        except TypeError:
            pass
    assert registered(bare=True) == sorted(built) and set(registered()) - set(built) == {"comet", "cosmos", "fedct", "fedmd"}
    assert registered(stacks=True, bare=True) == sorted(n for n, a in built.items() if a.capabilities.stacks)
    assert registered(stacks=False, bare=True) == sorted(n for n, a in built.items() if not a.capabilities.stacks)
    assert "fedavg" in registered(stacks=True) and "ditto" in registered(stacks=True) and "cgrl" in registered(stacks=False)
    assert registered(streams=False) == sorted(n for n, c in ALGORITHMS.items() if not c.capabilities.streams)
    assert registered(streams=True, stacks=False) == sorted(n for n, c in ALGORITHMS.items()
                                                            if c.capabilities.streams and not c.capabilities.stacks)
    assert registered() == sorted(ALGORITHMS)
