"""helpers.job.input_checks: strategy files and init checkpoints are checked against the job before launch."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helpers.train import strategy_layout as SL
from helpers.train import strategy_file as SF
from helpers.topics import strategy as S
from helpers.core.config import job_config
from helpers.core.errors import ConfigError
from helpers.job.input_checks import MAX_LINES, check_job_inputs, model_param_shapes

NUM_CLASSES = 16


@pytest.fixture(scope="module")
def cfg():
    return job_config("ci", num_classes=NUM_CLASSES, conv_impl="native")


def shapes_for(cfg, **changes):
    c = dataclasses.replace(cfg, **changes)
    return model_param_shapes(c.arch, c.num_classes, c.width, c.stem)


def write_strategy(path, shapes, layout):
    return SF.save_strategy(SF.build_strategy(shapes, SL.Layout.parse(layout)), path,
                           param_shapes=shapes if str(path).endswith(".json") else None)


def write_rank_ckpts(dst, shapes, strategy_file):
    arrays = {n: np.zeros(s, np.float32) for n, s in shapes.items()}
    S.write_rank_checkpoints(arrays, strategy_file, dst)
    return dst


@pytest.fixture(scope="module")
def files(tmp_path_factory, cfg):
    d = tmp_path_factory.mktemp("inputs")
    shapes = shapes_for(cfg)
    out = {name: write_strategy(d / f"{name}.json", shapes, name) for name in ("4x2", "2x4")}
    out["4x2_ckpt"] = write_rank_ckpts(d / "ckpt42", shapes, out["4x2"])
    out["2x4_ckpt"] = write_rank_ckpts(d / "ckpt24", shapes, out["2x4"])
    return out


def problems_of(cfg) -> str:
    with pytest.raises(ConfigError) as info:
        check_job_inputs(cfg)
    return str(info.value)


@pytest.mark.parametrize("arch, stem, width", [("resnet18", "small", 0.125), ("resnet50", "imagenet", 0.25)])
def test_shapes_on_paper_are_the_models_shapes(arch, stem, width):
    from helpers.train.models import build_model

    net = build_model(arch, 7, width, stem, "im2col")
    assert model_param_shapes(arch, 7, width, stem) == SF.shapes_of(net)


def test_a_job_without_files_is_not_checked(cfg):
    assert check_job_inputs(cfg) is None


def test_matching_strategy_and_rank_checkpoints_pass(cfg, files):
    assert check_job_inputs(cfg.replace(strategy_file=str(files["4x2"]),
                                        init_checkpoint=str(files["4x2_ckpt"]))) is None


def test_missing_files_are_both_named_in_one_error(cfg, tmp_path):
    text = problems_of(cfg.replace(strategy_file=str(tmp_path / "nope.json"),
                                   init_checkpoint=str(tmp_path / "no_ckpt")))
    assert f"strategy_file: no such file {tmp_path / 'nope.json'}" in text
    assert f"init_checkpoint: no such file or directory {tmp_path / 'no_ckpt'}" in text


def test_relative_paths_are_taken_from_the_course_home(cfg, files, monkeypatch):
    monkeypatch.setenv("COURSE_HOME", str(files["4x2"].parent))
    assert check_job_inputs(cfg.replace(strategy_file="4x2.json")) is None
    text = problems_of(cfg.replace(strategy_file="3x3.json"))
    assert str(files["4x2"].parent / "3x3.json") in text


def test_an_unreadable_strategy_file_is_named(cfg, tmp_path):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"\x00not a strategy")
    text = problems_of(cfg.replace(strategy_file=str(junk)))
    assert text.startswith("strategy_file: not a strategy file helpers.train.strategy_file.read_strategy can read")
    assert str(junk) in text


def test_a_strategy_file_of_another_arch_is_refused_with_few_lines(cfg, tmp_path):
    other = write_strategy(tmp_path / "r50.pb", shapes_for(cfg, arch="resnet50"), "4x2")   # protobuf: names only
    text = problems_of(cfg.replace(strategy_file=str(other)))
    lines = text.splitlines()
    assert "does not fit this job (resnet18" in lines[0]
    assert lines[1].startswith("  - 165 of its 267 parameters are not in this job's model, e.g. ['layer1.0.conv3.weight'")
    assert len(lines) <= 1 + MAX_LINES + 1


def test_a_strategy_file_of_another_class_count_is_refused(cfg, tmp_path):
    other = write_strategy(tmp_path / "c12.json", shapes_for(cfg, num_classes=12), "4x2")
    text = problems_of(cfg.replace(strategy_file=str(other)))
    assert "'fc.weight': the file records shape (12, 64), this job's model has (16, 64)" in text
    assert "'fc.bias'" in text


def test_a_strategy_file_of_another_width_is_refused(cfg, tmp_path):
    other = write_strategy(tmp_path / "w25.json", shapes_for(cfg, width=0.25), "4x2")
    assert "'stem.0.weight': the file records shape (16, 3, 3, 3)" in problems_of(cfg.replace(strategy_file=str(other)))


def test_a_strategy_file_of_another_world_size_is_refused(cfg, files):
    text = problems_of(cfg.replace(strategy_file=str(files["4x2"]), world_size=4, global_batch=32))
    assert "has product 8, but the world size is 4" in text


def test_a_strategy_file_without_the_classifier_is_refused(cfg, tmp_path):
    shapes = {n: s for n, s in shapes_for(cfg).items() if not n.startswith("fc.")}
    path = SF.save_strategy(SF.build_strategy(shapes, SL.Layout(8, 1), split=("stem",)), tmp_path / "nofc.pb")
    text = problems_of(cfg.replace(strategy_file=str(path)))
    assert "strategy has no layout for ['fc.weight', 'fc.bias']" in text


def test_init_checkpoint_without_every_rank_names_the_missing_ranks(cfg, files, tmp_path):
    import shutil

    partial = shutil.copytree(files["4x2_ckpt"], tmp_path / "partial")
    for r in (5, 7):
        shutil.rmtree(partial / f"rank_{r}")
    text = problems_of(cfg.replace(strategy_file=str(files["4x2"]), init_checkpoint=str(partial)))
    assert "no rank_<r>/*.ckpt for ranks [5, 7] of this job" in text


def test_rank_checkpoints_cut_for_another_layout_are_refused(cfg, files):
    text = problems_of(cfg.replace(strategy_file=str(files["4x2"]), init_checkpoint=str(files["2x4_ckpt"])))
    assert "'fc.weight' has shape (4, 64), rank 0 of this job needs (8, 64) (and 1 more of another shape)" in text
    lines = text.splitlines()
    assert len(lines) == 1 + MAX_LINES + 1 and lines[-1] == f"  - ... and {8 - MAX_LINES} more"   # a line per rank


def test_rank_checkpoints_of_another_model_are_refused(cfg, tmp_path, files):
    other = shapes_for(cfg, arch="resnet34")
    strategy = write_strategy(tmp_path / "r34.json", other, "4x2")
    ckpts = write_rank_ckpts(tmp_path / "r34ckpt", {n: s for n, s in other.items() if "layer4" not in n}, strategy)
    text = problems_of(cfg.replace(strategy_file=str(files["4x2"]), init_checkpoint=str(ckpts)))
    assert "lacks 25 parameters of this job's model, e.g. ['layer4.0.conv1.weight'" in text


def test_a_checkpoint_that_is_not_one_is_named(cfg, files, tmp_path):
    import shutil

    broken = shutil.copytree(files["4x2_ckpt"], tmp_path / "broken")
    (broken / "rank_2" / "rank2.ckpt").write_bytes(b"garbage")
    text = problems_of(cfg.replace(strategy_file=str(files["4x2"]), init_checkpoint=str(broken)))
    assert f"{broken / 'rank_2' / 'rank2.ckpt'} is unreadable" in text


def test_gpu_wants_the_full_checkpoint_file(cfg, files):
    gpu = cfg.replace(device_target="GPU", strategy_file=str(files["4x2"]), init_checkpoint=str(files["4x2_ckpt"]))
    assert "give the merged full checkpoint file, not the directory" in problems_of(gpu)


def test_file_problems_and_class_count_come_in_one_error(cfg, files, tmp_path, standin):
    (tmp_path / "empty").mkdir()
    few = cfg.replace(num_classes=4, strategy_file=str(tmp_path / "missing.pb"), init_checkpoint=str(tmp_path / "empty"))
    lines = problems_of(few).splitlines()
    assert lines[0].startswith("num_classes: 4 is fewer than the 10 class folders")
    assert any(ln.startswith("strategy_file: no such file") for ln in lines)
    assert "  - no rank_<r>/*.ckpt for ranks [0, 1, 2, 3, 4, 5, 6, 7] of this job" in lines


def test_a_strategy_file_without_batchnorm_statistics_passes(cfg, tmp_path):
    """MindSpore writes none with only_trainable_params=True; the worker needs only the classifier's layout."""
    trainable = {n: s for n, s in shapes_for(cfg).items() if not n.endswith(("moving_mean", "moving_variance"))}
    path = write_strategy(tmp_path / "trainable.json", trainable, "4x2")
    assert check_job_inputs(cfg.replace(strategy_file=str(path))) is None
    partial = write_strategy(tmp_path / "no_layer4.json", {n: s for n, s in trainable.items() if "layer4" not in n}, "4x2")
    assert "15 parameters of this job's model are not in the file" in problems_of(cfg.replace(strategy_file=str(partial)))


def test_more_dataset_workers_than_cpus_are_refused_before_launch(cfg, monkeypatch):
    """A config changed after job_config (``replace``) still meets MindSpore's bound before msrun starts."""
    import helpers.core.config as config

    monkeypatch.setattr(config.os, "cpu_count", lambda: 2)
    check_job_inputs(dataclasses.replace(cfg, dataset_workers=2))
    with pytest.raises(ConfigError, match=r"dataset_workers: at most 2.*\(got 3\)"):
        check_job_inputs(dataclasses.replace(cfg, dataset_workers=3))
