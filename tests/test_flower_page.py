"""The Flower chapter's procedures (fedbook.studies.flower): a cell of its study is one method on one
engine against the same job in process (bit-identical on the loopback engine, the largest
difference of the server arrays in float64), a runtime cell of a method not run on the runtimes has
no rows, a crafted job is refused, the exercises' runs say what the page says, and the prose's
numbers are read from the study's frames and the saved benchmark."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedbook.studies.flower import (EQUIVALENCE, WIRE, bench_tables, bytes_table, check_settings, equivalence_cell,
                                    equivalence_table, job_of, mirrored_bytes, node_failure, numbers, trust_refusal)
from fedbook.study import Study, run_study
from fedlib.results import run_differences
from fedlib.messages import largest_difference

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def frames():
    def cell(seed, engine, method):
        return equivalence_cell(seed, engine, method, n_clients=2, rounds=1, runtime_methods=["fedavg"])

    out = run_study(Study("flower", cell, grid={"engine": ["loopback"], "method": ["fedavg", "ditto"]}))
    return out | {"skipped": cell(0, "simulation", "ditto")}  # ditto does not run on the runtimes here


def test_a_loopback_run_is_the_in_process_run_bit_for_bit(frames):
    eq = frames["equivalence"]
    assert eq[["engine", "method", "identical"]].values.tolist() == [["loopback", "fedavg", "yes"],
                                                                      ["loopback", "ditto", "yes"]]
    assert (eq["largest difference"] == 0.0).all() and (eq["mean local accuracy"] == eq["in-process"]).all()
    assert equivalence_table(eq).columns.tolist() == [c for c in EQUIVALENCE if c != "survivors"]
    wire = frames["wire"]
    assert set(wire["method"]) == {"fedavg", "ditto"} and (wire["flower_bytes"] > wire["bytes"]).all()
    table = bytes_table(wire, "loopback")
    assert table.columns.tolist() == ["method", "direction", "kind", "bytes", "flower_bytes", "Flower / fedlib"]
    assert table["bytes"].sum() == wire["bytes"].sum()
    # the cell's difference is fedlib.messages'
    job = job_of("fedavg", 2, 1, 0)
    a, b = job.run_in_process(), job.run_in_process()
    assert not run_differences(a, b) and largest_difference(a.server.arrays, b.server.arrays) == 0.0
    # and both see one ulp moved in one server array
    arrays = dict(b.server.arrays)
    name = sorted(arrays)[0]
    arrays[name] = arrays[name].clone()
    arrays[name].view(-1)[0] = torch.nextafter(arrays[name].view(-1)[0], torch.tensor(float("inf")))
    moved = dataclasses.replace(b, server=dataclasses.replace(b.server, arrays=arrays))
    assert run_differences(a, moved) == ["server"] and largest_difference(a.server.arrays, arrays) > 0.0


def test_a_method_not_run_on_the_runtimes_has_no_rows_there(frames):
    skipped = frames["skipped"]
    assert len(skipped["equivalence"]) == len(skipped["wire"]) == 0
    assert skipped["equivalence"].dtypes.astype(str).to_dict() == EQUIVALENCE
    assert skipped["wire"].dtypes.astype(str).to_dict() == WIRE


def test_settings_are_checked_and_a_crafted_job_is_refused():
    P = types.SimpleNamespace(engines=["loopback"], methods=["fedavg"], runtime_methods=["fedavg"])
    check_settings(P)
    for change, message in ((dict(engines=["ray"]), r"unknown engines \['ray'\]; valid: .*loopback"),
                            (dict(methods=["nope"]), r"unknown methods \['nope'\]; valid: .*fedavg"),
                            (dict(runtime_methods=["ditto"]), r"runtime_methods \['ditto'\] are not among methods")):
        with pytest.raises(ValueError, match=message):
            check_settings(types.SimpleNamespace(**{**vars(P), **change}))
    assert trust_refusal(job_of("fedavg", 2, 1, 0)) == "“call target 'os:system' is not allowed on this machine”"


def test_the_exercises_runs():
    failure = node_failure(0)
    assert failure["ex1_error"].startswith("client 1 gave no reply in round 1")
    assert failure["ex1_dropped_rounds"] == "1, 2, 3" and failure["ex1_evaluated"] == 3
    mirror = mirrored_bytes(2, 1, 0)
    assert mirror["ex2_same"] == "the same final server state"
    assert mirror["ex2_up_mirror"] != mirror["ex2_up_nomirror"]
    assert mirror["ex2_up_extra"] > 0  # the replies without the mirrored states carry fewer bytes


def test_the_numbers_of_the_prose(frames):
    saved, bench, view = bench_tables(ROOT / "book" / "data" / "bench_flower.json")
    assert view.columns[-1] == "identical" and set(view["identical"]) <= {"yes", "no"}
    assert len(view) and (view["identical"] == "yes").all()  # the saved benchmark: every engine bit for bit
    eq = pd.concat([frames["equivalence"], frames["equivalence"].assign(survivors=[0, 2])], ignore_index=True)
    P = types.SimpleNamespace(methods=["fedavg", "ditto"], runtime_methods=["ditto"], engines=["loopback", "deployment"],
                              n_clients=2, rounds=1)
    R = numbers(eq, frames["wire"], P, seconds=1.0, saved=saved, bench=bench)
    assert R["fl_n_runs"] == R["fl_n_same"] == 4 and R["fl_same_reading"].startswith("every one of them")
    assert R["fl_runtime_runs"] == "; ditto also on deployment" and R["fl_first_engine"] == "loopback"
    assert R["fl_survivors"] == "2 processes of the deployment were left running (a defect)"
    wire = frames["wire"]
    assert R["fl_overhead"] == float(100 * (wire["flower_bytes"].sum() / wire["bytes"].sum() - 1))
    assert R["fl_bench_deployment_round"] == float(bench.loc["deployment", "round_s_ratio"])
    assert R["fl_bench_date"] == saved["date"]
