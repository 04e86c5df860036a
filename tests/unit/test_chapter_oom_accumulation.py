"""Chapter 02's steps without launching jobs: sizes per preset, the planner's tables, the cap, the grad-check
reduction over ranks, and the record the conclusions read (``helpers.chapters.oom_accumulation``)."""

from types import SimpleNamespace

import numpy as np
import pytest

from helpers.chapters import oom_accumulation as oa
from helpers.conclusions import ch02
from helpers.core.errors import OOM_TEXTS, JobFailed, failure_kind
from helpers.topics import memory_scenarios as scenarios

RECORD_KEYS = {
    "preset", "rehearsal", "device_target", "arch", "world_size", "oom_reproduced", "oom_error_kind", "mem_cap_mb",
    "accumulation_succeeded", "batch_per_rank", "micro_batch", "accumulation_steps", "accumulated_samples_per_step",
    "conv_impl", "memory_measured", "peak_mb", "peak_rss_mb", "peak_host_mb", "host_budget_mb", "activation_mb", "throughput_img_s", "timed_step_s", "grad_check_ranks", "grad_check_same_on_all_ranks",
    "grad_max_abs_diff_no_bn", "grad_max_abs_diff_bn", "grad_max_rel_diff_bn", "grad_cosine_bn",
    "grad_max_abs_diff_bn_frozen", "grad_max_rel_diff_bn_frozen", "grad_cosine_bn_frozen", "bn_frozen_layers",
    "builtin_cell_grad_ratio", "builtin_parallel_grad_ratio", "planner_slope_mib_per_image",
    "measured_slope_mib_per_image", "planner_vs_measured_slope_ratio", "conv_kernels", "ncsp_copy_mib_per_image",
    "composite_conv_passes", "published", "blog_planner_gib", "blog_activation_gib", "blog_fits_40gb",
    "blog_scenarios", "blog_scenarios_28", "allocator_max_allocated_mb", "model_has_gradient_accumulation_steps",
    "model_error"}


def summary(rank: int, **changes) -> dict:
    s = {f"grad_max_{w}_diff_{n}": 1e-7 for w in ("abs", "rel") for n in ("no_bn", "bn_frozen")}
    s.update(grad_max_abs_diff_bn=0.01 * (rank + 1), grad_max_rel_diff_bn=0.1, grad_cosine_bn=0.9 - 0.1 * rank,
             grad_cosine_bn_frozen=1.0, bn_frozen_layers=20, builtin_nn_GradAccumulationCell_ratio=4.0,
             builtin_parallel_GradAccumulation_ratio=4.0, **{f"grad_max_abs_{n}": 0.5 for n in ("no_bn", "bn", "bn_frozen")})
    s.update(changes)
    return s


def test_ci_sizes_and_overrides():
    s = oa.chapter_sizes("ci")
    assert (s.per_rank, s.k, s.micro, s.impl, s.margin) == (96, 4, 24, "im2col", 256)
    assert s.base.global_batch == 96 * s.base.world_size and s.base.amp_level == "O0" and s.base.steps == 3
    assert (s.base.image_size, s.model_image_size) == (64, 32), "the experiment outgrows a 1 GiB pool block"
    assert oa.chapter_sizes("ci", image_size=48).base.image_size == 48
    assert oa.chapter_sizes("gpu8", rehearse=True).base.image_size == 224
    t = oa.chapter_sizes("ci", sweep_batches=(8, 16), batch_per_rank=32, accumulation_steps=2, world_size=2)
    assert (t.per_rank, t.k, t.micro, t.base.world_size, t.base.global_batch) == (32, 2, 16, 2, 64)
    assert t.preset["sweep"]["batches"] == (8, 16) and oa.PRESETS["ci"]["sweep"]["batches"] == (16, 48, 96)


def test_the_oom_experiment_runs_on_few_ranks_within_the_host_memory_budget():
    """Each full-batch rank holds ~1.65 GB (it outgrows a 1 GiB pool block): 2 ranks at ci, 4 at cpu keep the
    chapter within helpers.job.host_memory.BUDGET_MB; gpu8 keeps its cards; world_size overrides."""
    from helpers.job.host_memory import BUDGET_MB, job_need_mb

    sizes = {p: oa.chapter_sizes(p) for p in ("ci", "cpu", "gpu8")}
    assert [sizes[p].base.world_size for p in sizes] == [2, 4, 8]
    assert oa.chapter_sizes("ci", world_size=4).base.world_size == 4
    assert oa.chapter_sizes("gpu8", rehearse=True).base.world_size == 2
    for p in ("ci", "cpu"):
        need = job_need_mb(sizes[p].base)
        assert need <= BUDGET_MB[p] - 1024, f"{p}: {need:.0f} MB leaves no room for the kernel"
        assert job_need_mb(sizes[p].base.replace(world_size=8, global_batch=8 * sizes[p].per_rank)) > BUDGET_MB[p], \
            "on 8 ranks the experiment would not fit the budget: why it runs on fewer"


def test_gpu8_runs_resnet152_and_the_rehearsal_its_own_sizes():
    assert oa.chapter_sizes("gpu8").base.arch == "resnet152"
    r = oa.chapter_sizes("gpu8", rehearse=True)
    assert r.base.arch != "resnet152" and (r.per_rank, r.k) == (8, 4) and r.preset["grad_check_conv"] == "im2col"


def test_blog_case_fits_in_40_gib_by_the_planner():
    est, rows = oa.blog_rows()
    assert est["blog"].arch == "resnet152" and 11 < est["blog"].total_gib < 12
    assert [r[5] for r in rows] == ["yes", "yes"] and rows[0][6] > 64


def test_experiment_plan_both_convolutions_and_the_accumulation_row():
    plan, rows = oa.experiment_plan(oa.chapter_sizes("ci"), num_classes=10)
    assert len(plan) == 4 and len(rows) == 5
    full, micro = plan[("full batch", "im2col")], plan[("micro-batch x 4", "im2col")]
    assert full.batch == 96 and micro.batch == 24 and micro.activation_bytes < full.activation_bytes
    assert rows[-1][2] == "micro-batch x K = 24 x 4"


def test_cap_below_the_measured_run_on_cpu_and_three_quarters_of_the_plan_elsewhere():
    s = oa.chapter_sizes("ci")
    assert oa.cap_mb_for(s, {"max_vms_peak": 3000.4}, 0) == 2744
    gpu = oa.chapter_sizes("gpu8")
    assert oa.cap_mb_for(gpu, {"max_vms_peak": 1.0}, 4 * 2**30) == 3072


def test_grad_check_record_takes_the_worst_rank_and_compares_ranks():
    g = oa.grad_check_record([summary(0), summary(1)])
    assert g["grad_max_abs_diff_bn"] == pytest.approx(0.02) and g["grad_cosine_bn"] == pytest.approx(0.8)
    assert g["grad_check_same_on_all_ranks"] is True and g["builtin_errors"]["parallel_GradAccumulation"] == "ran"
    assert oa.grad_check_record([summary(0), summary(1, grad_max_abs_diff_no_bn=2e-7)])["grad_check_same_on_all_ranks"] is False
    rows = oa.grad_check_rows(g, "resnet18")
    assert [r[0] for r in rows][2] == "resnet18, BatchNorm frozen (20 layers)" and rows[0][4] == "—"


def test_model_has_no_accumulation_argument():
    a = oa.model_api_check()
    assert a["has_argument"] is False and a["model_error"].startswith(("TypeError", "ValueError"))


def fake_chapter() -> oa.OomChapter:
    """An ``OomChapter`` whose steps' numbers are set by hand (no job, no data)."""
    ch = object.__new__(oa.OomChapter)
    ch.preset, ch.rehearse, ch.s = "ci", False, oa.chapter_sizes("ci")
    ch.base = ch.s.base
    ch.oom_error, ch.cap_mb = JobFailed("oom", "Memory not enough"), 2744
    n = ch.base.world_size
    ch.acc = SimpleNamespace(summaries={r: {} for r in range(n)}, config=ch.base, weights_identical=True,
                             metric=lambda key: np.full((n, 3), 96))
    ch.memory, ch.peak = "rss", {"full_batch": 3000.0, "accumulated": 2000.0}
    ch.act, ch.peak_rss = {"full_batch": 1500.0, "accumulated": 500.0}, dict(ch.peak)
    ch.tp, ch.gc_ranks = {"full_batch": 50.0, "accumulated": 40.0}, 2
    ch.tp_steps = {"full_batch": [1.9, 2.0], "accumulated": [2.4, 2.5]}
    ch.host_mb = {"full_batch": 4100.0, "accumulated": 2900.0}
    ch.grad = oa.grad_check_record([summary(0), summary(1)])
    return later_steps(ch)


def later_steps(ch: oa.OomChapter) -> oa.OomChapter:
    """The numbers of the sweep and errata steps, set by hand."""
    ch.pvm = {"planner_slope_mib_per_image": 0.57, "measured_slope_mib_per_image": 1.8,
              "planner_vs_measured_slope_ratio": 0.57 / 1.8}
    ch.conv_kernels = {"forward_training": "jit_uni_ncsp:conv+ref:any"}
    ch.composite, ch.copies_mib = ["forward_training"], 1.2
    ch.published, ch.blog = scenarios.compare_published("fp32"), oa.blog_rows()[0]["blog"]
    ch.blog_scenarios = {t: scenarios.keep_scenarios(target_gib=t) for t in (35.0, 28.0)}
    ch.allocator_mb, ch.api = 0.0, oa.model_api_check()
    return ch


def test_results_hold_every_key_the_conclusions_read():
    r = fake_chapter().results()
    assert set(r) == RECORD_KEYS
    assert r["oom_reproduced"] is True and r["accumulation_succeeded"] is True and r["accumulated_samples_per_step"] == 96
    claims = {c.id: c for c in ch02.build(r)}
    assert claims["full_batch_oom"].holds is True and claims["builtin_cells_sum"].holds is True
    assert r["host_budget_mb"] == 6144 and claims["host_memory_budget"].holds is True



# ------------------------------------------------------------------ chapter 02 on GPU/Ascend: device memory
def card_job(run_dir, cfg, device_peak: float, rss_peak: float):
    """A finished job's records in the GPU/Ascend format (``helpers.train.worker``): the ready and step records
    carry the device allocator's figures (1200 MB in use at the ready point) next to the host's RSS."""
    from helpers.core.metrics import MetricsWriter
    from helpers.job.launch import JobResult

    steps = {}
    for r in range(cfg.world_size):
        w = MetricsWriter(run_dir, r)
        w.write("ready", rss_mb=2000.0, vms_mb=40000.0, rss_peak_mb=2000.0, vms_hwm_mb=40000.0, device_mb=1200.0,
                device_peak_mb=1500.0)
        steps[r] = [dict(step=i, loss=6.9, step_s=0.5, data_s=0.01, compute_s=0.49, samples=cfg.batch_per_rank,
                         rss_peak_mb=rss_peak, rss_mb=rss_peak - 50, vms_peak_mb=41000.0, vms_hwm_mb=41000.0,
                         device_mb=1300.0, device_peak_mb=device_peak + r) for i in range(3)]
        for rec in steps[r]:
            w.write("step", **rec)
        w.close()
    return JobResult(run_dir, cfg, 0, 1.0, steps=steps, summaries={r: {"checksum": "c"} for r in steps})


def test_on_a_card_the_chapter_reports_device_memory_not_rss(tmp_path, monkeypatch):
    ch = object.__new__(oa.OomChapter)
    ch.preset, ch.rehearse, ch.progress, ch.s = "gpu8", False, "none", oa.chapter_sizes("gpu8")
    ch.base = ch.s.base
    ch.plan = oa.experiment_plan(ch.s, num_classes=1000)[0]
    # the host's RSS grows under accumulation (it holds no activations on a card); the device's peak falls
    jobs = {"full_batch": card_job(tmp_path / "full", ch.base, device_peak=30000.0, rss_peak=5100.0),
            "accumulated_capped": card_job(tmp_path / "acc", ch.base, device_peak=9000.0, rss_peak=5300.0),
            "grad_check": SimpleNamespace(summaries={0: summary(0), 1: summary(1)})}

    def run_job(cfg, progress=None, files=None):
        if cfg.name == "full_batch_capped":
            raise JobFailed("oom", "Device(id:0) memory isn't enough and alloc failed", rank=0)
        return jobs[cfg.name]

    shown = []
    monkeypatch.setattr(oa, "run_job", run_job)
    monkeypatch.setattr(oa, "show_table", lambda rows, headers: shown.append((rows, headers)))
    monkeypatch.setattr(oa, "show_md", lambda text: None)
    ch.run_full_and_capped()
    ch.run_accumulated()
    ch.show_accumulation()
    ch.run_grad_check()
    (full_rows, full_head), (acc_rows, acc_head) = shown[0], shown[1]
    assert full_head[1:3] == ["device memory before the first step (MB)", "peak device memory (MB)"]
    assert full_rows[7][1:4] == ("1200", "30007", "5100"), "rank 7: device before, device peak, host RSS"
    assert acc_head[1:3] == ["peak device memory per rank (MB)", "above the device memory before the first step (MB)"]
    assert acc_rows[0][1:3] == ("30007", "28807") and acc_rows[1][1:3] == ("9007", "7807")
    assert acc_rows[2] == ("cap per rank", str(ch.cap_mb), "", "", ""), "the cap limits device memory"
    assert not [h for _, head in shown for h in head if "on CPU" in h or h.startswith(("peak RSS per", "above the RSS"))]
    assert shown[-1][1][-1] == "on GPU, DATA_PARALLEL"
    r = later_steps(ch).results()
    assert r["memory_measured"] == "device" and r["peak_mb"] == {"full_batch": 30007.0, "accumulated": 9007.0}
    assert r["activation_mb"] == {"full_batch": 28807.0, "accumulated": 7807.0}
    assert r["peak_rss_mb"] == {"full_batch": 5100.0, "accumulated": 5300.0}
    memory = {c.id: c for c in ch02.build(r)}["memory_saved"]
    assert memory.holds is True and memory.text.startswith("Peak device memory per rank fell from 30007 to 9007 MB")


# ------------------------------------------------------------------ the kind a failed rank's error is given
def mindspore_error(text: str) -> str:
    """``text`` where MindSpore puts an allocator's message: a worker traceback's last line and its C++ stack."""
    return ("Traceback (most recent call last):\n  File \"helpers/train/worker.py\", line 270, in _loop\n"
            f"RuntimeError: {text} size[1073741824], kernel name: Default/network-WithLossCell/Conv2D-op12\n\n"
            "----------------------------------------------------\n- C++ Call Stack: (For framework developers)\n"
            "----------------------------------------------------\n"
            "mindspore/ccsrc/backend/ms_backend/runtime/actors/memory_manager_actor.cc:285 SetOpContextMemoryAllocFail\n")


@pytest.mark.parametrize("text", [t for t, _ in OOM_TEXTS])
def test_every_oom_text_in_an_error_is_kind_oom(text):
    assert failure_kind(mindspore_error(text)) == "oom"
    assert failure_kind(mindspore_error(text.upper())) == "oom"     # matched whatever the case


@pytest.mark.parametrize("line", [
    "[ERROR] DEVICE(4711,7f3c2effd6c0,python):2026-12-05-16:37:37.580.274 [mindspore/ccsrc/plugin/gpu/res_manager/"
    "mem_manager/gpu_memory_allocator.cc:85] AllocDeviceMem] cudaMalloc failed, ret[2], out of memory",
    "RuntimeError: cuDNN Error: cudnnConvolutionForward failed | Error Number: 2 CUDNN_STATUS_ALLOC_FAILED",
    "RuntimeError: Out of Memory!!! Request memory size: 2147483648B, Memory Statistic: Device HBM memory size: 65536M",
    "RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: Default/Conv2D-op1, alloc size: 5B"])
def test_device_allocators_messages_are_kind_oom(line):
    assert failure_kind(line) == "oom"


@pytest.mark.parametrize("line", [
    # oneDNN refusing a shape or layout: not memory (it contains "could not create a primitive")
    "RuntimeError: could not create a primitive descriptor for the convolution forward propagation primitive. Run "
    "workload with environment variable ONEDNN_VERBOSE=all to get additional diagnostic information.",
    "TypeError: instance allocation failed: new instance has no pybind11-registered base types",
    "RuntimeError: Somas allocate failed for graph 3",
    "RuntimeError: cuDNN Error: cudnnSetTensorNdDescriptor failed | Error Number: 3 CUDNN_STATUS_BAD_PARAM",
    "ValueError: For 'Conv2D', the dimension of 'x' must be 4, but got 3."])
def test_other_errors_stay_crashes(line):
    assert failure_kind(mindspore_error(line)) == "crash"


def test_a_warning_about_memory_in_the_log_tail_does_not_make_an_oom():
    warning = ("[WARNING] DEVICE(4711,7f3c,python):2026-12-05-16:37:37.580.274 [ascend_memory_adapter.cc:120] "
               "Initialize] Reserved memory size for other components(1073741824) is less than recommend size"
               "(4294967296), It may lead to Out Of Memory in HCCL or other components, Please double check context "
               "key 'max_device_memory'")
    tail = f"{warning}\n" + mindspore_error("Call aclnnAdd failed, detail:EZ1001: the shapes cannot broadcast")
    assert failure_kind(tail) == "crash"
    assert failure_kind(tail.replace("[WARNING]", "[ERROR]")) == "oom"


def test_a_ranks_error_line_leaves_out_mindsporess_rules_and_cpp_stack():
    from helpers.core.errors import readable_error

    text = ("RuntimeError: \n----------------------------------------------------\n- Memory not enough:\n"
            "----------------------------------------------------\nMemory isn't enough and alloc failed, kernel name: "
            "BroadcastTo-op17, alloc size: 14155776B.\n\n----------------------------------------------------\n"
            "- C++ Call Stack: (For framework developers)\n----------------------------------------------------\n"
            "mindspore/ccsrc/backend/graph_scheduler.cc:1168 Run\n")
    assert readable_error(text) == ("RuntimeError: \n- Memory not enough:\nMemory isn't enough and alloc failed, "
                                    "kernel name: BroadcastTo-op17, alloc size: 14155776B.")
    assert failure_kind(text) == "oom" and readable_error("ValueError: x") == "ValueError: x"


def test_a_thread_that_cannot_start_under_an_address_space_cap_is_out_of_memory():
    from helpers.core.config import JobConfig

    text = mindspore_error("Resource temporarily unavailable")     # pthread_create's EAGAIN, as MindSpore raises it
    assert failure_kind(text, capped=True) == "oom"
    assert failure_kind(text) == "crash", "without a cap the same text may be a thread limit"
    assert JobConfig(mem_cap_mb=3000).caps_address_space and not JobConfig().caps_address_space
    assert not JobConfig(mem_cap_mb=3000, device_target="GPU").caps_address_space
