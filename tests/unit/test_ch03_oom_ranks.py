"""Chapter 03's out-of-memory experiment on fewer ranks than the chapter (issue 35: the host-memory budget): ci
and cpu plan 2 ranks (2x1 against 1x2), gpu8 and its rehearsal the world size; its jobs keep the per-rank batch."""

import pytest

from helpers.chapters import hybrid_parallel as chapter
from helpers.core.config import job_config
from helpers.core.errors import ConfigError
from helpers.job import launch
from helpers.topics import hybrid as H
from helpers.train.strategy_layout import Layout
from tests.unit.chapter_cases import capture_shown


def setup_for(tmp_path, preset="ci", rehearse=False, oom_ranks=None, **changes):
    base = job_config(preset, rehearse=rehearse, **changes)
    layouts, resume = chapter.default_layouts(base.world_size)
    return chapter.Setup(base.replace(num_classes=16), layouts, resume, tmp_path,
                         chapter.oom_world(preset, rehearse, base.world_size, oom_ranks))


def test_each_preset_plans_its_ranks():
    assert chapter.oom_world("ci", False, 8) == 2 and chapter.oom_world("cpu", False, 8) == 2
    assert chapter.oom_world("gpu8", False, 8) == 8                       # the world size, unchanged
    assert chapter.oom_world("gpu8", True, 2) == 2                        # the rehearsal: its world
    assert chapter.oom_world("cpu", False, 1) == 1                        # never more than the chapter's world
    assert chapter.oom_world("ci", False, 8, oom_ranks=4) == 4            # the notebook parameter wins
    assert H.oom_layouts(2) == (Layout(2, 1), Layout(1, 2)) and H.oom_layouts(4) == (Layout(4, 1), Layout(2, 2))
    assert H.oom_layouts(8) == (Layout(8, 1), Layout(4, 2))


@pytest.mark.parametrize("bad", [0, 1, 3, True, "2"])
def test_ranks_that_cannot_split_the_classifier_two_ways_are_refused(bad):
    with pytest.raises(ConfigError, match="oom_ranks"):
        H.oom_layouts(bad)


def test_the_setup_table_names_the_experiments_ranks(tmp_path, monkeypatch):
    shown = capture_shown(monkeypatch, chapter)
    chapter.show_setup(setup_for(tmp_path))
    rows = dict(shown[-1][0])
    assert rows["out-of-memory experiment"] == "2 ranks: 2x1 against 1x2, 8 images per rank (section 2)"
    assert rows["layouts"] == "8x1, 4x2"                                  # the rest of the chapter: the world
    gpu = setup_for(tmp_path, "gpu8")
    assert gpu.oom_ranks == 8 and not gpu.runs_oom and "not run" in chapter.oom_setting(gpu)
    assert not setup_for(tmp_path, "gpu8", rehearse=True).runs_oom


def test_ci_runs_the_experiment_on_2_ranks_with_the_chapters_per_rank_batch(tmp_path, monkeypatch):
    """The layouts handed to ``classifier_oom``, and the first job it launches: 2 ranks, 8 images each (ci)."""
    s = setup_for(tmp_path)
    monkeypatch.setattr(chapter, "new_run_dir", lambda *a: tmp_path)
    launched = []

    class Launched(Exception):
        pass

    def first_job(cfg, progress="auto"):
        launched.append(cfg)
        raise Launched

    monkeypatch.setattr(launch, "run_job", first_job)
    with pytest.raises(Launched):
        chapter.run_oom(s, oom_classes=1000)
    (cfg,) = launched
    assert (cfg.world_size, cfg.global_batch, cfg.batch_per_rank) == (2, 16, s.base.batch_per_rank)
    assert cfg.name == "oom-2x1-uncapped" and cfg.num_classes == 1000 and s.base.world_size == 8
    assert cfg.env[H.NO_CHECKPOINT_ENV] == "1" and cfg.mem_cap_mb is None and cfg.timeout_s == s.base.timeout_s
    assert sorted(p.name for p in tmp_path.glob("strategy_oom_*")) == ["strategy_oom_1x2.ckpt",
                                                                       "strategy_oom_2x1.ckpt"]


def test_classifier_oom_refuses_layouts_on_different_ranks(tmp_path):
    with pytest.raises(ConfigError, match="as many ranks"):
        H.classifier_oom(job_config("ci"), Layout(8, 1), Layout(1, 2), 1000, tmp_path)


def test_param_checksum_hashes_the_same_bytes_without_copies():
    """param_checksum reads fp32 parameters in place (a 1x2 rank's 50 MB slice under chapter 03's cap); its
    checksum and sum are the former formula's (``astype(np.float32).tobytes()``), fp16 parameters included."""
    import hashlib

    import mindspore as ms
    import numpy as np
    from mindspore import nn

    from helpers.train.worker import param_checksum

    net = nn.Cell()
    net.fc = nn.Dense(5, 3)
    net.half = ms.Parameter(ms.Tensor(np.linspace(-1, 1, 6, dtype=np.float16).reshape(2, 3)), name="half")
    h, total = hashlib.sha256(), 0.0
    for p in sorted(net.trainable_params(), key=lambda p: p.name):
        a = p.asnumpy().astype(np.float32)
        h.update(a.tobytes())
        total += float(a.sum(dtype=np.float64))
    assert param_checksum(net) == (h.hexdigest(), total)
