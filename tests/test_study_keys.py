"""fedbook.study's cache keys: run_study digests the sources a study's cells execute once per study
(not once per cell: parsing every module a cell reaches takes about a second), and the key it gives a
cell is the key cell_key computes for that cell alone."""

from __future__ import annotations

import functools

import pandas as pd
import torch

import fedbook.study as study_module
from fedbook.study import Study, cell_key, run_study


def _cell(seed: int, n: int, scale: float = 1.0) -> pd.DataFrame:
    return pd.DataFrame({"x": [seed * n * scale]})


def test_run_study_digests_the_sources_once_and_keys_each_cell_as_cell_key_alone(tmp_path, monkeypatch):
    _cell.__module__ = "fedbook.study"  # a function of fedbook: the cache covers it
    study = Study("toy", functools.partial(_cell, scale=2.0), grid={"n": [1, 2, 3]}, seeds=[0, 1])
    alone = [cell_key(study, cell, torch.get_num_threads()) for cell in study.cells()]  # run_study in this process
    assert None not in alone and len(set(alone)) == 6
    calls = []
    real = study_module.module_files
    monkeypatch.setattr(study_module, "module_files", lambda module: calls.append(module) or real(module))
    first = run_study(study, cache=tmp_path)
    assert calls == ["fedbook.study"]  # one digest for the six cells
    assert sorted(p.stem for p in (tmp_path / "toy").glob("*.json")) == sorted(alone)
    again = run_study(study, cache=tmp_path)  # every cell read back
    pd.testing.assert_frame_equal(first["toy"], again["toy"])
    assert first["toy"]["x"].tolist() == [0.0, 2.0, 0.0, 4.0, 0.0, 6.0]
