"""The pure parts of chapter 02's memory measurements (``helpers.topics.memory_runs``; no processes started here)."""

import numpy as np
import pytest

from helpers.core.config import job_config
from helpers.topics.memory_runs import cap_below, fit_slope, planner_vs_measured


def test_fit_slope_and_cap_below():
    slope, intercept = fit_slope([8, 16, 32], [108.0, 116.0, 132.0])
    assert slope == pytest.approx(1.0) and intercept == pytest.approx(100.0)
    assert cap_below(3735.3, 256) == 3479


def test_planner_vs_measured_uses_the_planners_activation_slope():
    from helpers.core.memory_planner import estimate

    est = estimate("resnet18", 1, 32, num_classes=10, width=0.125, stem="small")
    per_image = est.activation_bytes_per_image / 2**20
    rows = [{"batch": b, "steady_peak_rss_mb": 500 + 2 * per_image * b, "conv_impl": "native",
             "image_size": 32} for b in (8, 32, 64)]
    r = planner_vs_measured(rows)
    assert r["measured_slope_mib_per_image"] == pytest.approx(2 * per_image)
    assert r["planner_vs_measured_slope_ratio"] == pytest.approx(0.5)
    assert r["planner_mb"][0] == pytest.approx(500 + per_image * 8)


@pytest.mark.parametrize("device", [False, True])
def test_job_memory_per_rank_in_the_device_measure_on_a_card_and_rss_on_cpu(tmp_path, device):
    from helpers.job.launch import JobResult
    from helpers.topics.memory_runs import job_memory
    from helpers.core.metrics import MetricsWriter

    steps = {}
    for r in range(2):
        w = MetricsWriter(tmp_path, r)
        # the worker's records; on GPU/Ascend (device) with the allocator's figures (helpers.train.worker)
        w.write("ready", rss_mb=100.0 + r, vms_mb=900.0, **({"device_mb": 500.0 + r, "device_peak_mb": 600.0}
                                                            if device else {}))
        steps[r] = []
        for i, peak in enumerate((150.0, 170.0 + r)):
            rec = dict(step=i, rss_peak_mb=peak, rss_mb=peak - 5, vms_peak_mb=1000.0 + i,
                       **({"device_mb": 510.0, "device_peak_mb": 1900.0 + 100 * i + 10 * r} if device else {}))
            w.write("step", **rec)
            steps[r].append(rec)
        w.close()
    cfg = job_config("ci").replace(device_target="GPU" if device else "CPU")
    m = job_memory(JobResult(tmp_path, cfg, 0, 1.0, steps=steps, summaries={0: {}, 1: {}}))
    # the host's figures, always
    assert m["peak_rss"] == [170.0, 171.0] and m["ready_rss"] == [100.0, 101.0] and m["max_vms_peak"] == 1001.0
    if device:   # the device allocator's peak since the ready point, above its memory in use there
        assert m["memory"] == "device" and m["peak"] == m["device_peak"] == [2000.0, 2010.0]
        assert m["ready"] == m["ready_device"] == [500.0, 501.0] and m["activation"] == [1500.0, 1509.0]
        assert m["max_peak"] == m["max_device_peak"] == 2010.0 and m["max_activation"] == 1509.0
    else:
        assert m["memory"] == "rss" and m["peak"] == [170.0, 171.0] and m["activation"] == [70.0, 70.0]
        assert m["max_peak"] == 171.0 and m["max_activation"] == 70.0 and m["max_device_peak"] is None


def test_the_worker_records_device_memory_only_on_a_card():
    from helpers.train.worker import device_memory_mb

    assert device_memory_mb(job_config("ci")) == {}
    # on a GPU config it reads mindspore.runtime (0 here: this process's device is the CPU, as documented)
    gpu = device_memory_mb(job_config("ci").replace(device_target="GPU"), reset_peak=True)
    assert gpu == {"device_mb": 0.0, "device_peak_mb": 0.0}


def test_onednn_conv_kernels_reads_the_verbose_lines():
    from helpers.topics.memory_runs import onednn_conv_kernels

    lines = ["onednn_verbose,v1,info,cpu,isa:Intel AVX-512",
             "onednn_verbose,v1,primitive,exec,cpu,convolution,jit_uni_ncsp:conv+ref:any,forward_training,src:f32,,alg,mb16,27.5",
             "onednn_verbose,v1,primitive,exec,cpu,convolution,jit_uni_ncsp:conv+ref:any,forward_training,src:f32,,alg,mb16,2.5",
             "onednn_verbose,v1,primitive,exec,cpu,convolution,gemm:jit,forward_training,src:f32,,alg,mb16,1.0",
             "onednn_verbose,v1,primitive,exec,cpu,batch_normalization,bnorm_jit:avx512,forward_training,,,,1.0",
             "dnnl_verbose,exec,cpu,convolution,gemm:jit,backward_weights,src:f32,,alg,mb16,3.0",
             "RESULT {}"]
    assert onednn_conv_kernels(lines) == {"backward_weights": "gemm:jit", "forward_training": "jit_uni_ncsp:conv+ref:any"}
    assert onednn_conv_kernels([]) == {}


def test_job_img_per_s_is_global_batch_over_the_median_slowest_rank_step_after_step_0(tmp_path):
    from helpers.job.launch import JobResult

    steps = {r: [dict(step=i, step_s=s) for i, s in enumerate(times)]
             for r, times in enumerate([(9.0, 1.0, 2.0, 1.0), (5.0, 2.0, 1.0, 4.0)])}
    cfg = job_config("ci").replace(world_size=2, global_batch=8)
    res = JobResult(tmp_path, cfg, 0, 1.0, steps=steps, summaries={})
    assert res.img_per_s() == pytest.approx(8 / float(np.median([2.0, 2.0, 4.0])))


def test_measure_step_memory_runs_in_a_fresh_interpreter_and_reads_the_onednn_kernels():
    from helpers.topics.memory_runs import measure_step_memory

    r = measure_step_memory(2, width=0.125, steps=1, onednn_verbose=True)
    assert r["batch"] == 2 and r["conv_impl"] == "native" and r["step_s"] > 0
    assert r["allocator_max_allocated_mb"] == 0 and r["conv_kernels"]


def test_the_sweep_measures_every_batch_in_its_own_process_and_keeps_their_order(monkeypatch):
    import threading
    import time

    from helpers.topics import memory_runs

    seen = []

    def fake(batch, **kwargs):
        time.sleep(0.05 * (3 - batch))          # the first batch finishes last
        seen.append((batch, threading.get_ident(), kwargs["arch"]))
        return {"batch": batch}

    monkeypatch.setattr(memory_runs, "measure_step_memory", fake)
    assert [r["batch"] for r in memory_runs.sweep([1, 2, 3], arch="resnet18")] == [1, 2, 3]
    assert sorted(b for b, _, _ in seen) == [1, 2, 3] and {a for _, _, a in seen} == {"resnet18"}
