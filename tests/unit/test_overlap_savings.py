"""helpers.core.overlap_savings (ring all-reduce time, the bucket timeline) against hand-computed cases, and
helpers.topics.overlap_on_cards (gpu8's ResNet-50 buckets) against independent counts."""

import pytest

from helpers.core import overlap_savings as ov


def test_bus_factor_is_nccl_tests_all_reduce_correction():
    assert ov.bus_factor(8) == pytest.approx(1.75)
    assert ov.bus_factor(2) == pytest.approx(1.0)
    assert ov.bus_factor(1) == 0.0
    with pytest.raises(ValueError):
        ov.bus_factor(0)


def test_allreduce_time_is_size_times_factor_over_busbw():
    assert ov.allreduce_s(1e9, 8, 175.0) == pytest.approx(0.01)      # 1 GB * 1.75 / 175 GB/s
    assert ov.allreduce_s(4e6, 2, 100.0) == pytest.approx(4e-5)
    with pytest.raises(ValueError):
        ov.allreduce_s(1e6, 8, 0.0)


def test_busbw_interpolates_in_log_size_and_clamps():
    sizes, bw = (1024, 4096), (1.0, 3.0)
    assert ov.busbw_at(2048, sizes, bw) == pytest.approx(2.0)         # half way in log2
    assert ov.busbw_at(10, sizes, bw) == 1.0 and ov.busbw_at(1 << 20, sizes, bw) == 3.0
    assert ov.busbw_at(4096, sizes, bw) == 3.0


def test_busbw_from_published_times_gives_those_times_back():
    fig = ov.PUBLISHED_BUSBW["hccl_8npu"]
    sizes, bw = ov.busbw_table(fig)
    for s, t_us in zip(sizes, fig["time_us"]):
        assert 1e6 * ov.allreduce_s(s, fig["ranks"], ov.busbw_at(s, sizes, bw)) == pytest.approx(t_us)
    assert ov.busbw_table({"ranks": 8, "sizes_bytes": (8,), "time_us": (1.0,)})[1][0] == pytest.approx(0.014)


def test_every_published_figure_names_its_source_and_hardware():
    for fig in list(ov.PUBLISHED_BUSBW.values()) + list(ov.PUBLISHED_THROUGHPUT.values()):
        assert fig["source"] and fig["url"].startswith("https://") and fig["hardware"]
    for fig in ov.PUBLISHED_BUSBW.values():
        sizes, bw = ov.busbw_table(fig)
        assert list(sizes) == sorted(sizes) and len(sizes) == len(bw) and min(bw) > 0
    for _, bw_key, tp_key in ov.PAIRS:
        assert bw_key in ov.PUBLISHED_BUSBW and tp_key in ov.PUBLISHED_THROUGHPUT


def test_one_bucket_cannot_overlap():
    t = ov.timeline([0.3], ov.ready_times([5.0], 2.0), 2.0)
    assert t["comm_s"] == pytest.approx(0.3) and t["exposed_s"] == pytest.approx(0.3)
    assert t["saving_s"] == pytest.approx(0, abs=1e-12)


def test_small_buckets_hide_all_but_the_last():
    # 4 buckets of equal work over 4 s of backward: ready at 1, 2, 3, 4; 0.5 s each starts when ready
    t = ov.timeline([0.5] * 4, ov.ready_times([1, 1, 1, 1], 4.0), 4.0)
    assert [b["start_s"] for b in t["buckets"]] == pytest.approx([1, 2, 3, 4])
    assert t["exposed_s"] == pytest.approx(0.5) and t["saving_s"] == pytest.approx(1.5)


def test_slow_collectives_queue_behind_each_other():
    # ready at 1 and 2 (backward 2 s), 3 s each: the second waits for the first (4 -> 7)
    t = ov.timeline([3.0, 3.0], ov.ready_times([1, 1], 2.0), 2.0)
    assert [b["start_s"] for b in t["buckets"]] == pytest.approx([1, 4])
    assert t["exposed_s"] == pytest.approx(5.0) and t["saving_s"] == pytest.approx(1.0)


def test_ready_times_follow_the_work_done():
    assert ov.ready_times([1, 3], 8.0) == pytest.approx([2.0, 8.0])
    with pytest.raises(ValueError):
        ov.ready_times([0, 0], 1.0)


def test_group_work_cuts_on_tensor_boundaries_only():
    assert ov.group_work([4, 4, 8, 2], [1, 2, 3, 4], [8, 10]) == [3, 7]
    with pytest.raises(ValueError, match="boundary"):
        ov.group_work([4, 4, 8], [1, 2, 3], [6, 10])
    with pytest.raises(ValueError, match="cover"):
        ov.group_work([4, 4, 8], [1, 2, 3], [8])


def test_pair_savings_with_one_bucket_saves_nothing_and_reports_the_step():
    p = ov.pair_savings("NCCL", [16 * 2**20], [1.0], 128)
    tp = ov.PUBLISHED_THROUGHPUT["nvidia_dle_a100"]
    assert p["saving_s"] == pytest.approx(0, abs=1e-12) and p["step_s"] == pytest.approx(128 / tp["img_per_s"])
    assert p["backward_s"] == pytest.approx(ov.BACKWARD_SHARE * 128 / tp["img_per_s"])


def test_gpu8_resnet50_buckets_and_work_from_the_model():
    from helpers.topics import overlap_on_cards as oc

    grads, macs = oc.gpu8_gradients()
    assert len(grads) == 161 and grads[0] == 4 * 1000       # fc bias first: backward order
    # ResNet-50 at 224 px: ~4.09 G multiply-adds (torchvision's published 4.09 GFLOPS counts multiply-adds)
    assert sum(macs) == pytest.approx(4.09e9, rel=0.01)
    c = oc.calculation()
    assert len(c["bucket_mib"]) == 6                          # what the gpu8 rehearsal counted (6 + overflow flag)
    assert sum(c["bucket_mib"]) == pytest.approx(sum(grads) / 2**20)
    for p in c["pairs"].values():
        assert 0 < p["saving_ms"] < p["comm_ms"] and p["exposed_ms"] == pytest.approx(p["comm_ms"] - p["saving_ms"])
