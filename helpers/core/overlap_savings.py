"""What overlapping the gradient AllReduce with backward would save on cards: a calculation from published figures.

Ring all-reduce time from a published bus bandwidth (nccl-tests' definition, ``doc/PERFORMANCE.md``: busbw =
algbw * 2(n-1)/n, algbw = S / t, so t = S * 2(n-1)/n / busbw), with the bandwidth read off a published table at each
bucket's size (the tables' small sizes carry the per-call latency, so none is added). The timeline: backward
produces the buckets last layer first, each bucket's AllReduce starts once its last gradient is ready and the
previous AllReduce has finished (one communication stream); what remains after backward ends is exposed.
Nothing here is measured on this machine; no MindSpore import.
"""

from __future__ import annotations

import math

# Only numbers read from a public source, with where they come from and the hardware they are for.
PUBLISHED_BUSBW = {
    "nccl_a100x8": {
        "library": "NCCL",
        "hardware": "8x A100-SXM4-80GB (one Azure ND A100 v4 VM, NVLink/NVSwitch, NCCL 2.18.5)",
        "what": "nccl-tests all_reduce_perf -b 8 -e 8G -f 2 -g 8, float sum, in-place bus bandwidth (GB/s = 1e9 B/s);"
                " the page names the NVLS algorithm",
        "source": "Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md ('NCCL Bandwidth'), commit "
                  "3bb66cacc25632d8ece36bc1d5128c5ea886a60b; command from Benchmarks/NCCLBandwidth.py at that commit",
        "url": "https://github.com/Azure/AI-benchmarking-guide/blob/3bb66cacc25632d8ece36bc1d5128c5ea886a60b/"
               "Azure_Results/ND_A100_v4_results.md",
        "ranks": 8,
        # the page labels them 1K ... 8G (65K, 132K, 524K: rounded); the command doubles from 8 bytes: 2**10 .. 2**33
        "sizes_bytes": tuple(2 ** k for k in range(10, 34)),
        "busbw_gbs": (0.04, 0.08, 0.17, 0.33, 0.67, 1.37, 2.70, 5.15, 10.11, 19.24, 36.22, 53.54, 71.43, 89.99,
                      109.22, 132.77, 166.63, 174.18, 213.87, 221.58, 228.10, 230.22, 230.48, 231.58),
    },
    "hccl_8npu": {
        "library": "HCCL",
        "hardware": "8 Ascend NPUs, chip not named (one server; the page does not say which chip)",
        "what": "HCCL Performance Tester example output, mpirun -n 8 ./bin/all_reduce_test -b 8K -e 64M -f 2 -d fp32 "
                "-o sum -p 8: avg_time per size (the page's alg_bandwidth is size / time in GiB/s); bus bandwidth "
                "here = size * 2(n-1)/n / avg_time",
        "source": "Huawei CANN Community Edition docs, HCCL Performance Tester, 'Result Description' "
                  "(HCCLpertest_16_0006)",
        "url": "https://www.hiascend.com/document/detail/en/CANNCommunityEdition/latest/devaids/hccltool/"
               "HCCLpertest_16_0006.html",
        "ranks": 8,
        "sizes_bytes": tuple(8192 * 2 ** k for k in range(14)),
        "time_us": (764.55, 858.80, 901.10, 900.00, 928.50, 1573.45, 1831.25, 1778.30, 1763.30, 1801.75, 1767.65,
                    1940.90, 1714.85, 2630.20),
    },
}
# One card's ResNet-50 v1.5 training throughput (no communication in it): the compute the AllReduces could hide under.
PUBLISHED_THROUGHPUT = {
    "nvidia_dle_a100": {
        "hardware": "1x A100 80GB in a DGX A100, PyTorch, mixed precision",
        "img_per_s": 2470, "batch_per_card": 256,
        "source": "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, 'Training "
                  "performance: NVIDIA DGX A100 (8x A100 80GB)', 1 GPU row; batch from configs.yml; commit "
                  "291f0d02e815b148fa5c2b81bf07aa3552142895",
        "url": "https://github.com/NVIDIA/DeepLearningExamples/blob/291f0d02e815b148fa5c2b81bf07aa3552142895/"
               "PyTorch/Classification/ConvNets/resnet50v1.5/README.md",
    },
    "mindspore_910": {
        "hardware": "1x Ascend 910, MindSpore 0.5.0-beta, mixed precision",
        "img_per_s": 2115, "batch_per_card": 256,
        "source": "MindSpore docs, docs/source_en/benchmark.md ('Training Performance', ResNet-50 v1.5, 1 * Ascend "
                  "910), commit 8cda9bf27b5f23947805c20de4384a8d18e01a08",
        "url": "https://github.com/mindspore-ai/docs/blob/8cda9bf27b5f23947805c20de4384a8d18e01a08/docs/source_en/"
               "benchmark.md",
    },
}
# (label, bus bandwidth entry, throughput entry): the pairs the chapter computes
PAIRS = (("NCCL", "nccl_a100x8", "nvidia_dle_a100"), ("HCCL", "hccl_8npu", "mindspore_910"))
BACKWARD_SHARE = 2 / 3      # an assumption: backward is about 2/3 of a step's compute (twice the forward's work)


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce correction: bytes a rank sends per byte reduced, 2(n-1)/n."""
    if ranks < 1:
        raise ValueError(f"ranks: at least 1 (got {ranks})")
    return 2 * (ranks - 1) / ranks


def busbw_table(figure: dict) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(sizes in bytes, bus bandwidth in GB/s) of a ``PUBLISHED_BUSBW`` entry (from its times if it has them)."""
    sizes = tuple(figure["sizes_bytes"])
    if "busbw_gbs" in figure:
        return sizes, tuple(figure["busbw_gbs"])
    f = bus_factor(figure["ranks"])
    return sizes, tuple(s * f / (t * 1e-6) / 1e9 for s, t in zip(sizes, figure["time_us"]))


def busbw_at(nbytes: float, sizes, busbw) -> float:
    """Bus bandwidth (GB/s) at ``nbytes``: linear in log2(size) between table sizes, the end values beyond."""
    if nbytes <= sizes[0]:
        return float(busbw[0])
    if nbytes >= sizes[-1]:
        return float(busbw[-1])
    for (s0, b0), (s1, b1) in zip(zip(sizes, busbw), zip(sizes[1:], busbw[1:])):
        if s0 <= nbytes <= s1:
            w = (math.log2(nbytes) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return float(b0 + w * (b1 - b0))
    raise ValueError("sizes: must be ascending")


def allreduce_s(nbytes: float, ranks: int, busbw_gbs: float) -> float:
    """Seconds of one ring all-reduce of ``nbytes`` on ``ranks`` at ``busbw_gbs``: S * 2(n-1)/n / busbw."""
    if busbw_gbs <= 0:
        raise ValueError(f"busbw_gbs: must be > 0 (got {busbw_gbs})")
    return nbytes * bus_factor(ranks) / (busbw_gbs * 1e9)


def group_work(tensor_bytes, tensor_work, bucket_bytes) -> list[float]:
    """Work per bucket: tensors (backward order) taken in turn until each bucket's bytes, which must cut exactly."""
    if len(tensor_bytes) != len(tensor_work):
        raise ValueError(f"tensor_work: {len(tensor_work)} values for {len(tensor_bytes)} tensors")
    out, i = [], 0
    for size in bucket_bytes:
        got, work = 0, 0.0
        while got < size and i < len(tensor_bytes):
            got, work, i = got + tensor_bytes[i], work + tensor_work[i], i + 1
        if got != size:
            raise ValueError(f"bucket_bytes: {size} does not end on a tensor boundary (reached {got})")
        out.append(work)
    if i != len(tensor_bytes):
        raise ValueError(f"bucket_bytes: cover {i} of {len(tensor_bytes)} tensors")
    return out


def ready_times(bucket_work, backward_s: float) -> list[float]:
    """When each bucket's last gradient is ready: backward time spread in proportion to the work done so far."""
    total = float(sum(bucket_work))
    if total <= 0:
        raise ValueError("bucket_work: must sum to more than 0")
    out, acc = [], 0.0
    for w in bucket_work:
        acc += w
        out.append(backward_s * acc / total)
    return out


def timeline(comm_s, ready_s, backward_s: float) -> dict:
    """One stream, bucket k starting at max(ready_k, end_k-1): total, exposed after backward, saving vs serial."""
    rows, end = [], 0.0
    for t, r in zip(comm_s, ready_s):
        start = max(r, end)
        end = start + t
        rows.append({"ready_s": r, "start_s": start, "end_s": end, "comm_s": t})
    total = float(sum(comm_s))
    exposed = max(0.0, end - backward_s) if rows else 0.0
    return {"comm_s": total, "exposed_s": exposed, "saving_s": total - exposed, "buckets": rows}


def overlap_savings(bucket_bytes, bucket_work, backward_s: float, figure: dict) -> dict:
    """``timeline`` of ``bucket_bytes`` (backward order) at ``figure``'s bandwidths, with each bucket's figures."""
    sizes, bw = busbw_table(figure)
    rates = [busbw_at(b, sizes, bw) for b in bucket_bytes]
    comm = [allreduce_s(b, figure["ranks"], r) for b, r in zip(bucket_bytes, rates)]
    out = timeline(comm, ready_times(bucket_work, backward_s), backward_s)
    for row, b, r in zip(out["buckets"], bucket_bytes, rates):
        row.update(bytes=int(b), busbw_gbs=r)
    return dict(out, backward_s=backward_s, ranks=figure["ranks"])


def backward_s(throughput: dict, batch_per_card: int, share: float = BACKWARD_SHARE) -> float:
    """Backward seconds per step: ``share`` of batch / (one card's img/s), taken to hold at this batch."""
    return share * batch_per_card / throughput["img_per_s"]


def pair_savings(label: str, bucket_bytes, bucket_work, batch_per_card: int) -> dict:
    """``overlap_savings`` for one of ``PAIRS`` (by label), with its step time and the sources' keys."""
    _, bw_key, tp_key = next(p for p in PAIRS if p[0] == label)
    fig, tp = PUBLISHED_BUSBW[bw_key], PUBLISHED_THROUGHPUT[tp_key]
    bwd = backward_s(tp, batch_per_card)
    out = overlap_savings(bucket_bytes, bucket_work, bwd, fig)
    step = batch_per_card / tp["img_per_s"]
    return dict(out, label=label, step_s=step, batch_per_card=batch_per_card, busbw_source=bw_key,
                throughput_source=tp_key, saving_share=out["saving_s"] / (step + out["comm_s"]))
