"""helpers.hybrid without msrun: the layout read from a strategy file, the classifier cut per rank, the
GPU/Ascend plan (SEMI_AUTO_PARALLEL cannot run on CPU, so its configuration is what is tested), checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import hybrid as H
from helpers import strategy as S
from helpers.config import job_config
from helpers.errors import ConfigError, DataError

NUM_CLASSES = 16


@pytest.fixture(scope="module")
def cfg():
    return job_config("ci", num_classes=NUM_CLASSES, conv_impl="native")


@pytest.fixture(scope="module")
def full_net(cfg):
    return H.build_full_net(cfg, NUM_CLASSES)


@pytest.fixture(scope="module")
def files(tmp_path_factory, full_net):
    d = tmp_path_factory.mktemp("strategies")
    out = {}
    for name in ("8x1", "4x2", "2x4"):
        out[name] = S.save_strategy(S.build_strategy(full_net, S.Layout.parse(name)), d / f"{name}.json",
                                    param_shapes=full_net)
    return out


@pytest.mark.parametrize("name", ["8x1", "4x2", "2x4"])
def test_classifier_layout_is_read_from_the_file(files, name):
    assert H.classifier_layout(S.read_strategy(files[name]), 8) == S.Layout.parse(name)


def test_classifier_layout_refuses_what_the_cpu_path_cannot_build(tmp_path, full_net, files):
    with pytest.raises(ConfigError, match="world size 4"):
        H.classifier_layout(S.read_strategy(files["4x2"]), 4)
    no_fc = {k: v for k, v in S.read_strategy(files["4x2"]).items() if not k.startswith("fc.")}
    with pytest.raises(ConfigError, match="fc.weight"):
        H.classifier_layout(no_fc, 8)
    # split on the feature dimension (tensor map [-1, 0]) is not a class split
    smap = S.build_strategy(full_net, S.Layout(4, 2))
    for item in smap.parallel_layout_item:
        if item.param_name == "fc.weight":
            del item.parallel_layouts.tensor_map[:]
            item.parallel_layouts.tensor_map.add().dim.extend([-1, 0])
    with pytest.raises(ConfigError, match="class dimension"):
        H.classifier_layout(S.read_strategy(S.save_strategy(smap, tmp_path / "bad.ckpt")), 8)


def test_cut_classifier_takes_each_ranks_rows_and_keeps_names(cfg, files):
    strategy = S.read_strategy(files["2x4"])
    full = H.build_full_net(cfg, NUM_CLASSES)
    w, b = full.fc.weight.asnumpy(), full.fc.bias.asnumpy()
    shards = {}
    for rank in range(8):
        net = H.cut_classifier(H.build_full_net(cfg, NUM_CLASSES), strategy, rank)
        assert (net.fc.weight.name, net.fc.bias.name) == H.CLASSIFIER
        assert tuple(net.fc.weight.shape) == (NUM_CLASSES // 4, w.shape[1])
        m = rank % 4
        np.testing.assert_array_equal(net.fc.weight.asnumpy(), w[m * 4:(m + 1) * 4])
        np.testing.assert_array_equal(net.fc.bias.asnumpy(), b[m * 4:(m + 1) * 4])
        shards[rank] = net.fc.weight.asnumpy()
    np.testing.assert_array_equal(S.merge_shards(shards, strategy["fc.weight"], replica_atol=0.0), w)


def test_same_seed_same_start_on_every_rank(cfg):
    a, b = H.build_full_net(cfg, NUM_CLASSES), H.build_full_net(cfg, NUM_CLASSES)
    for pa, pb in zip(a.get_parameters(), b.get_parameters()):
        np.testing.assert_array_equal(pa.asnumpy(), pb.asnumpy())


def test_ordered_params_put_the_classifier_last(full_net):
    back, fc = H._ordered_params(full_net)
    assert [p.name for p in fc] == list(H.CLASSIFIER)
    assert len(back) + 2 == len(full_net.trainable_params())


def test_classifier_bytes_per_rank(files, full_net):
    feat = full_net.feature_dim
    dp = H.classifier_bytes_per_rank(files["8x1"], 8, feat, NUM_CLASSES)
    assert dp == NUM_CLASSES * (feat + 1) * 4
    assert H.classifier_bytes_per_rank(files["2x4"], 8, feat, NUM_CLASSES) * 4 == dp


def test_semi_auto_plan_loads_the_same_file(cfg, files):
    """The GPU/Ascend path: semi-auto parallel over 8 cards, the file loaded, classifier split 2x4."""
    plan = H.semi_auto_plan(cfg.replace(strategy_file=str(files["2x4"]), device_target="GPU"))
    ctx = plan["context"]
    assert plan["layout"] == "2x4"
    assert ctx["parallel_mode"] == "semi_auto_parallel" and ctx["device_num"] == 8
    assert ctx["strategy_ckpt_config"]["load_file"] == str(files["2x4"].resolve())
    assert plan["matmul_in_strategy"] == ((2, 1), (4, 1))
    assert plan["bias_add_in_strategy"] == ((2, 4), (4,))
    with pytest.raises(ConfigError, match="strategy_file"):
        H.semi_auto_plan(cfg)


def test_hybrid_config_sets_the_file_and_no_compile_cache(cfg, files):
    a = H.hybrid_config(cfg, S.Layout(4, 2), files["4x2"], steps=2)
    assert a.strategy_file == str(files["4x2"].resolve()) and a.steps == 2
    assert a.compile_cache is False
    with pytest.raises(ConfigError, match="4 ranks"):
        H.hybrid_config(cfg, S.Layout(2, 2), files["4x2"])


@pytest.mark.parametrize("bad", [0, -3, True, 2.5])
def test_config_refuses_bad_num_classes(bad):
    with pytest.raises(ConfigError, match="num_classes"):
        job_config("ci", num_classes=bad)


def test_num_classes_cannot_drop_classes(standin):
    with pytest.raises(ConfigError, match="fewer than"):
        H._num_classes(job_config("ci", num_classes=4))
    assert H._num_classes(job_config("ci", num_classes=12)) == 12
    assert H._num_classes(job_config("ci")) == 10


def test_rank_checkpoints_load_only_with_their_layout(tmp_path, cfg, files):
    full = H.build_full_net(cfg, NUM_CLASSES)
    arrays = {p.name: p.asnumpy() for p in full.get_parameters()}
    S.write_rank_checkpoints(arrays, files["2x4"], tmp_path / "c24")
    strategy = S.read_strategy(files["2x4"])
    net = H.cut_classifier(H.build_full_net(cfg, NUM_CLASSES), strategy, 6)
    net.fc.weight.set_data(net.fc.weight * 0)
    H.load_rank_checkpoint(net, tmp_path / "c24", 6)
    np.testing.assert_array_equal(net.fc.weight.asnumpy(), arrays["fc.weight"][8:12])
    other = H.cut_classifier(H.build_full_net(cfg, NUM_CLASSES), S.read_strategy(files["4x2"]), 6)
    with pytest.raises(DataError, match="another layout"):
        H.load_rank_checkpoint(other, tmp_path / "c24", 6)
    with pytest.raises(DataError, match="rank_9"):
        H.load_rank_checkpoint(net, tmp_path / "c24", 9)


def test_hybrid_config_trace_dir_goes_to_the_workers_env(tmp_path, cfg, files):
    a = H.hybrid_config(cfg.replace(env={"X": "1"}), S.Layout(4, 2), files["4x2"], trace_dir=tmp_path / "t")
    assert a.env == {"X": "1", H.TRACE_ENV: str((tmp_path / "t").resolve())}
    assert H.TRACE_ENV not in H.hybrid_config(cfg, S.Layout(4, 2), files["4x2"]).env


def test_step_trace_round_trip_puts_the_classifier_back_together(tmp_path, cfg, files):
    """What every rank writes per update, read back as the full network (the reference follows it)."""
    strategy = S.read_strategy(files["2x4"])
    full = H.build_full_net(cfg, NUM_CLASSES)
    want = {p.name: p.asnumpy() for p in full.trainable_params()}
    traces = []
    for rank in range(8):
        net = H.cut_classifier(H.build_full_net(cfg, NUM_CLASSES), strategy, rank)
        back, fc = H._ordered_params(net)
        traces.append(H.StepTrace(tmp_path, rank, back + fc))
    for t in traces:
        t()                                   # one "update" (weights unchanged): step_1
    for step in (0, 1):
        got = H.read_trace(tmp_path, files["2x4"], 8, step)
        assert set(got) == set(want)
        for name, a in want.items():
            np.testing.assert_array_equal(got[name], a)
    with pytest.raises(DataError, match="step_2"):
        H.read_trace(tmp_path, files["2x4"], 8, 2)


def test_rank_checkpoints_are_saved_as_slices(monkeypatch, tmp_path):
    """Under SEMI_AUTO_PARALLEL integrated_save=True (the default) would gather the split classifier on every
    rank; the merge step reads each rank file as a slice, so each rank must save its own."""
    import mindspore as ms
    from mindspore import nn

    from helpers.hybrid import save_rank_checkpoint

    seen = {}
    monkeypatch.setattr(ms, "save_checkpoint", lambda obj, path, **kw: seen.update(kw))
    net = nn.Cell()
    net.fc = nn.Dense(4, 2)
    save_rank_checkpoint(net, tmp_path, 3)
    assert seen.get("integrated_save") is False


def test_gpu_path_refuses_the_trace_and_a_sliced_init_checkpoint(monkeypatch, tmp_path):
    from helpers.config import JobConfig
    from helpers.errors import ConfigError
    from helpers.hybrid import TRACE_ENV, build_semi_auto_step, load_full_checkpoint

    monkeypatch.setenv(TRACE_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match="host code"):
        build_semi_auto_step(JobConfig(device_target="GPU"), 10)
    with pytest.raises(ConfigError, match="merged full checkpoint"):
        load_full_checkpoint(None, tmp_path)               # a folder of rank_<r> slices is the CPU path's input
