"""The study runner (fedbook.study): a grid of settings x seeds -> tidy frames, the same bits in one
process or several, each cell cached under a key of what it depends on."""

from __future__ import annotations

import functools
import json

import numpy as np
import pandas as pd
import pytest
import torch

from fedbook import study as study_module
from fedbook.study import Study, cell_key, run_study
from fedlib.rng import torch_generator


def noisy_cell(seed: int, n: int, scale: float = 1.0) -> dict[str, pd.DataFrame]:
    """A cell of a module (so it can be cached): draws from its own seed's stream."""
    g = torch_generator(seed, n)
    x = torch.randn(n, generator=g, dtype=torch.float64) * scale
    return {"draws": pd.DataFrame({"i": np.arange(n), "x": x.numpy()}),
            "summary": pd.DataFrame({"mean": [float(x.mean())], "label": [f"n={n}"], "ok": [True]})}


CALLS: list[tuple[int, int]] = []


def counted_cell(seed: int, n: int) -> pd.DataFrame:
    CALLS.append((seed, n))
    return pd.DataFrame({"y": [seed + n + 0.1], "nan": [float("nan")]})


@pytest.fixture
def cacheable(monkeypatch):
    """This test module's functions count as the project's (only fedlib's and fedbook's are cached)."""
    monkeypatch.setattr(study_module, "PACKAGES", {**study_module.PACKAGES, __name__.split(".")[0]: ()})


def test_cells_cross_the_grid_in_order_with_the_seeds_innermost():
    s = Study("toy", noisy_cell, grid={"n": [2, 3], "scale": [1.0, 2.0]}, seeds=[5, 1])
    assert s.cells() == [{"n": 2, "scale": 1.0, "seed": 5}, {"n": 2, "scale": 1.0, "seed": 1},
                         {"n": 2, "scale": 2.0, "seed": 5}, {"n": 2, "scale": 2.0, "seed": 1},
                         {"n": 3, "scale": 1.0, "seed": 5}, {"n": 3, "scale": 1.0, "seed": 1},
                         {"n": 3, "scale": 2.0, "seed": 5}, {"n": 3, "scale": 2.0, "seed": 1}]
    assert Study("plain", noisy_cell, seeds=[0, 1]).cells() == [{"seed": 0}, {"seed": 1}]


def test_each_table_is_the_cells_frames_with_the_setting_and_seed_in_front():
    frames = run_study(Study("toy", noisy_cell, grid={"n": [2, 3]}, seeds=[0, 1]))
    assert list(frames) == ["draws", "summary"]
    draws = frames["draws"]
    assert list(draws.columns) == ["n", "seed", "i", "x"] and len(draws) == 2 * 2 + 2 * 3
    expected = noisy_cell(1, 3)["draws"]["x"].to_numpy()
    got = draws[(draws["n"] == 3) & (draws["seed"] == 1)]["x"].to_numpy()
    assert np.array_equal(got, expected)
    assert frames["summary"]["label"].tolist() == ["n=2", "n=2", "n=3", "n=3"]


def test_worker_processes_give_the_same_bits_as_one_process():
    s = Study("toy", functools.partial(noisy_cell, scale=3.0), grid={"n": [4, 5]}, seeds=[0, 1, 2])
    one, two = run_study(s), run_study(s, workers=2)
    for name in one:
        pd.testing.assert_frame_equal(one[name], two[name], check_exact=True)


def test_a_cached_cell_reads_back_bit_for_bit_and_is_not_run_again(tmp_path, cacheable):
    CALLS.clear()
    s = Study("counted", counted_cell, grid={"n": [1, 2]}, seeds=[0, 7])
    first = run_study(s, cache=tmp_path)
    assert len(CALLS) == 4 and len(list((tmp_path / "counted").glob("*.json"))) == 4
    again = run_study(s, cache=tmp_path)
    assert len(CALLS) == 4  # every cell read from the cache
    pd.testing.assert_frame_equal(first["counted"], again["counted"], check_exact=True)
    assert (first.cached, first.cells, again.cached, again.cells) == (0, 4, 4, 4)
    assert again.seconds == first.seconds > 0  # the cells' own time, as they took it: not the time to read them back
    more = run_study(Study("counted", counted_cell, grid={"n": [1, 2]}, seeds=[0, 7, 8]), cache=tmp_path)
    assert len(CALLS) == 6 and len(more["counted"]) == 6  # only the new seed's cells ran
    record = json.loads(next((tmp_path / "counted").glob("*.json")).read_text())
    assert record["format"] == study_module.CACHE_FORMAT and set(record["frames"]) == {"counted"}


def failing_cell(seed: int) -> pd.DataFrame:
    if seed == 2:
        raise RuntimeError("stopped")
    CALLS.append((seed, 0))
    return pd.DataFrame({"y": [float(seed)]})


def test_an_interrupted_study_keeps_the_cells_it_finished(tmp_path, cacheable):
    CALLS.clear()
    with pytest.raises(RuntimeError, match="stopped"):
        run_study(Study("partial", failing_cell, seeds=[0, 1, 2]), cache=tmp_path)
    assert len(list((tmp_path / "partial").glob("*.json"))) == 2  # seeds 0 and 1, kept before seed 2 failed
    CALLS.clear()
    assert run_study(Study("partial", failing_cell, seeds=[0, 1]), cache=tmp_path)["partial"]["y"].tolist() == [0.0, 1.0]
    assert CALLS == []  # read back, not run again


def test_floats_strings_and_missing_values_read_back_exactly(tmp_path):
    frame = pd.DataFrame({"a": [0.1, np.nan, 1 / 3, -0.0, 1e-310], "b": [1, 2, 3, 4, 5],
                          "c": ["x", None, "z", "w", "v"], "d": [True, False, True, True, False],
                          "e": np.array([0.1, 0.2, np.nan, 3, 4], dtype=np.float32)})
    s = Study("mixed", lambda seed: frame)
    study_module._write(tmp_path / "x.json", s, {"seed": 0}, {"mixed": frame}, 1.5)
    frames, seconds = study_module._read(tmp_path / "x.json")
    back = frames["mixed"]
    assert seconds == 1.5
    assert back.dtypes.to_dict() == frame.dtypes.to_dict()
    for c in "ae":
        assert frame[c].to_numpy().tobytes() == back[c].to_numpy().tobytes()  # -0.0, subnormals, NaN
    assert back["b"].tolist() == [1, 2, 3, 4, 5] and back["d"].tolist() == [True, False, True, True, False]
    assert back["c"].isna().tolist() == [False, True, False, False, False]


def test_the_key_covers_the_function_its_bound_arguments_the_setting_the_seed_and_the_threads(cacheable):
    s = Study("toy", noisy_cell, grid={"n": [2]}, seeds=[0])
    key = cell_key(s, {"n": 2, "seed": 0}, 1)
    assert key == cell_key(s, {"n": 2, "seed": 0}, 1)
    others = [cell_key(s, {"n": 3, "seed": 0}, 1), cell_key(s, {"n": 2, "seed": 1}, 1), cell_key(s, {"n": 2, "seed": 0}, 2),
              cell_key(Study("other", noisy_cell), {"n": 2, "seed": 0}, 1),
              cell_key(Study("toy", functools.partial(noisy_cell, scale=2.0)), {"n": 2, "seed": 0}, 1),
              cell_key(Study("toy", counted_cell), {"n": 2, "seed": 0}, 1)]
    assert key not in others and len(set(others)) == len(others)


def test_the_key_covers_the_sources_the_function_runs(monkeypatch, cacheable):
    s = Study("toy", noisy_cell)
    key = cell_key(s, {"seed": 0}, 1)
    asked = []

    def files(module):
        asked.append(module)
        return [study_module.__file__]  # as if the function's module ran fedbook.study: another digest

    monkeypatch.setattr(study_module, "module_files", files)
    monkeypatch.setattr(study_module, "digest", lambda paths: "|".join(map(str, paths)))
    assert cell_key(s, {"seed": 0}, 1) != key and asked == [noisy_cell.__module__]


def test_a_function_outside_fedlib_and_fedbook_runs_uncached(tmp_path):
    def local(seed):
        return pd.DataFrame({"x": [seed]})

    s = Study("local", local, seeds=[0, 1])
    assert cell_key(s, {"seed": 0}, 1) is None
    assert run_study(s, cache=tmp_path)["local"]["x"].tolist() == [0, 1]
    assert not list(tmp_path.rglob("*.json"))


class OutsideMethod:
    """A class whose source no key covers (this test module is not fedlib's or fedbook's)."""

    lr = 0.1


def test_code_from_outside_fedlib_and_fedbook_bound_into_a_cell_leaves_it_uncached(cacheable, monkeypatch):
    from fedbook.sources import digest  # a function of fedbook: covered, until something foreign is bound to it

    monkeypatch.setattr(study_module, "PACKAGES", {k: v for k, v in study_module.PACKAGES.items() if k != __name__})
    assert cell_key(Study("ok", functools.partial(digest, [])), {"seed": 0}, 1) is not None
    assert cell_key(Study("method", functools.partial(digest, OutsideMethod())), {"seed": 0}, 1) is None
    assert cell_key(Study("cls", functools.partial(digest, [OutsideMethod])), {"seed": 0}, 1) is None
    assert cell_key(Study("grid", digest, grid={"m": [OutsideMethod()]}), {"m": OutsideMethod(), "seed": 0}, 1) is None
    assert study_module._foreign({"a": [OutsideMethod()]}) == f"an instance of OutsideMethod (module {__name__!r})"


def test_a_cell_of_fedbook_is_covered_by_its_modules_sources():
    from fedbook.sources import digest  # any function of fedbook

    key = cell_key(Study("fedbook_fn", digest), {"seed": 0}, 1)
    assert key is not None and len(key) == 40
    assert cell_key(Study("fedbook_fn", lambda seed: seed), {"seed": 0}, 1) is None  # a lambda: not covered


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(name="", run=noisy_cell), "a study's name must be a short identifier"),
    (dict(name="a b", run=noisy_cell), "a study's name must be a short identifier"),
    (dict(name="toy", run=3), "run must be a function of"),
    (dict(name="toy", run=noisy_cell, grid={"seed": [1]}), "setting 'seed' must be a name other than 'seed'"),
    (dict(name="toy", run=noisy_cell, grid={"n": []}), "setting 'n' must be a name other than 'seed' with at least one value"),
    (dict(name="toy", run=noisy_cell, seeds=[0, 0]), r"seeds must be distinct integers in \[0, 2\*\*32\)"),
    (dict(name="toy", run=noisy_cell, seeds=[-1]), r"seeds must be distinct integers"),
    (dict(name="toy", run=noisy_cell, seeds=[]), r"seeds must be distinct integers"),
    (dict(name="toy", run=noisy_cell, grid=[("n", [1])]), "grid must be a mapping"),
    (dict(name="toy", run=noisy_cell, grid={"n": "uci"}), r"setting 'n' must be a list of values, got the string 'uci'"),
    (dict(name="toy", run=noisy_cell, grid={"n": [1, 1]}), r"setting 'n' must hold distinct values"),
])
def test_a_bad_study_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Study(**kwargs)


def test_a_cell_that_returns_something_else_or_other_tables_is_refused():
    with pytest.raises(ValueError, match="a cell must return a DataFrame or a dict of DataFrames, got list"):
        run_study(Study("bad", lambda seed: [seed]))
    with pytest.raises(ValueError, match="every cell must return the same tables"):
        run_study(Study("bad", lambda seed: {f"t{seed}": pd.DataFrame({"x": [1]})}, seeds=[0, 1]))
    with pytest.raises(ValueError, match="column 'seed' that disagrees with its cell"):
        run_study(Study("bad", lambda seed: pd.DataFrame({"seed": [seed + 1]})))
    with pytest.raises(ValueError, match="run_study takes a Study"):
        run_study("toy")


def test_run_study_describes_the_study_once_and_keys_each_cell_as_cell_key_alone(tmp_path, monkeypatch, cacheable):
    study = Study("toy", functools.partial(noisy_cell, scale=2.0), grid={"n": [1, 2, 3]}, seeds=[0, 1])
    alone = [cell_key(study, cell, torch.get_num_threads()) for cell in study.cells()]  # run_study in this process
    assert None not in alone and len(set(alone)) == 6
    calls = []
    real = study_module.module_files
    monkeypatch.setattr(study_module, "module_files", lambda module: calls.append(module) or real(module))
    first = run_study(study, cache=tmp_path)
    assert calls == [noisy_cell.__module__]  # one sources digest for the six cells (parsing modules takes a second)
    assert sorted(p.stem for p in (tmp_path / "toy").glob("*.json")) == sorted(alone)
    again = run_study(study, cache=tmp_path)  # every cell read back
    for name in first:
        pd.testing.assert_frame_equal(first[name], again[name], check_exact=True)


def test_a_cells_named_index_becomes_columns_and_an_unnamed_one_is_dropped():
    def cell(seed):
        frame = pd.DataFrame({"m": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]})
        return {"filtered": frame[frame["x"] > 1], "named": frame.set_index("m")}

    frames = run_study(Study("index", cell))
    assert list(frames["filtered"].columns) == ["seed", "m", "x"] and frames["filtered"]["m"].tolist() == ["b", "c"]
    assert list(frames["named"].columns) == ["seed", "m", "x"]


def _closing_over(value):
    def cell(seed: int) -> pd.DataFrame:
        return pd.DataFrame({"x": [value(seed)]})
    return cell


def test_code_of_another_package_in_a_closure_or_a_default_leaves_a_cell_uncached(cacheable):
    from collections import OrderedDict

    assert study_module._foreign(_closing_over(OrderedDict)) == "a class of module 'collections' (OrderedDict)"
    assert study_module._foreign(_closing_over(abs)) is None  # a builtin: nothing to change
    assert study_module._foreign(_closing_over(noisy_cell)) is None  # this module's own (cacheable here)

    def with_default(seed, make=OrderedDict):
        return pd.DataFrame({"x": [seed]})
    assert "OrderedDict" in study_module._foreign(with_default)


def test_a_cell_bound_to_foreign_code_runs_while_the_others_are_read_back(tmp_path, cacheable):
    from collections import OrderedDict

    CALLS.clear()
    study = Study("mixed", lambda_free_cell, grid={"make": [OrderedDict, 1]}, seeds=[0])
    first = run_study(study, cache=tmp_path)
    again = run_study(study, cache=tmp_path)
    assert first.cached == 0 and again.cached == 1  # the foreign cell runs each time, the other is read back
    assert CALLS == [(0, "OrderedDict"), (0, "1"), (0, "OrderedDict")]
    assert not (tmp_path / "mixed" / "None.json").exists()


def lambda_free_cell(seed: int, make) -> pd.DataFrame:
    CALLS.append((seed, getattr(make, "__name__", str(make))))
    return pd.DataFrame({"y": [seed]})


def test_bound_frames_dtypes_and_bytes_are_keyed_by_their_values(cacheable):
    def key(value):
        return cell_key(Study("t", functools.partial(lambda_free_cell, make=value)), {"seed": 0}, 1)
    for a, b in ((pd.DataFrame({"x": [1.0]}), pd.DataFrame({"x": [2.0]})), (pd.Series([1, 2]), pd.Series([1.0, 2.0])),
                 (torch.float32, torch.float64), (b"a", b"b"), (1 + 2j, 1 + 3j), (pd.Index([1, 2]), pd.Index([1, 3]))):
        assert key(a) is not None and key(a) != key(b) and key(a) == key(a.copy() if hasattr(a, "copy") else a)
