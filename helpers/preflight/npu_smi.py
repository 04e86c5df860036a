"""The NPUs as ``npu-smi info`` shows them: chips (name, health, HBM), the processes on them, and the checks before
an Ascend job (enough chips for the local ranks, one chip generation, healthy, nobody else on them).

The format, read from Huawei's npu-smi reference ("npu-smi info", hiascend.com: a two-row block per chip, ``NPU Name |
Health | Power(W) Temp(C) Hugepages-Usage(page)`` over ``Chip [Device] | Bus-Id | AICore(%) Memory-Usage(MB)
[HBM-Usage(MB)]``; Health is OK, Warning, Alarm, Critical or UNKNOWN) and from 910A/910B/A3 outputs users posted; the
parser keys on ``|`` cells and ``a / b`` pairs, not on column offsets.
"""

from __future__ import annotations

import re

from helpers.preflight.machine_checks import Check

NPU_SMI = ["npu-smi", "info"]
HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
NO_NPU_SMI_FIX = ("install the Ascend NPU driver and firmware (npu-smi comes with the driver) and put npu-smi on "
                  "PATH, or run on an Ascend host")
_PIPE = dict(capture_output=True, text=True, timeout=30)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _chip_row(pending: dict, cells: list[str], hbm: bool) -> dict | None:
    """The second row of a chip's block (``chip [device] | bus-id | aicore  mem a / b  [hbm a / b]``)."""
    head = re.fullmatch(r"(\d+)(?:\s+(\d+))?", cells[0])
    if head is None or len(cells) < 3:
        return None
    pairs = re.findall(r"(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", cells[2])
    used, total = (float(x) for x in pairs[-1]) if pairs else (0.0, 0.0)
    core = re.match(r"\s*(\d+(?:\.\d+)?)", cells[2])
    return {**pending, "chip": int(head.group(1)), "device": int(head.group(2)) if head.group(2) else None,
            "bus_id": cells[1], "aicore": float(core.group(1)) if core else 0.0,
            "mem_kind": "HBM" if hbm and len(pairs) >= 2 else "memory", "mem_used_mb": used, "mem_total_mb": total}


def parse_npu_smi(text: str) -> tuple[list[dict], list[dict]]:
    """``(chips, processes)`` of ``npu-smi info``: per chip npu, name, health, chip, device, bus_id, aicore,
    mem_kind ("HBM" where the table has an HBM column), mem_used_mb, mem_total_mb; per process npu, chip, pid,
    name, mem_mb."""
    hbm = "HBM-Usage" in text
    health = {h.upper() for h in HEALTH_STATES}
    chips, procs, pending, in_procs = [], [], None, False
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            continue
        cells = _cells(line)
        if "Process id" in line:
            in_procs = True
            continue
        if in_procs:
            where = re.fullmatch(r"(\d+)(?:\s+(\d+))?", cells[0])
            if where and len(cells) >= 4 and cells[1].isdigit():
                mem = re.match(r"\d+(?:\.\d+)?", cells[3])
                procs.append(dict(npu=int(where.group(1)), chip=int(where.group(2)) if where.group(2) else None,
                                  pid=int(cells[1]), name=cells[2], mem_mb=float(mem.group(0)) if mem else 0.0))
            continue
        head = re.fullmatch(r"(\d+)\s+(\S.*)", cells[0])
        if head and len(cells) >= 3 and cells[1].upper() in health:
            pending = dict(npu=int(head.group(1)), name=head.group(2).strip(), health=cells[1])
        elif pending is not None:
            chip = _chip_row(pending, cells, hbm)
            if chip is not None:
                chips.append(chip)
                pending = None
    return chips, procs


def chip_family(name: str) -> str:
    """``910B3`` -> ``910B``; ``910A`` / ``910ProA`` / ``910ProB`` / ``910PremiumA`` -> ``910A``; anything else is
    its own name."""
    if re.match(r"910B\d", name):
        return "910B"
    if name == "910A" or re.fullmatch(r"910(Pro[AB]|PremiumA)", name):
        return "910A"
    return name


def _procs_on(chip: dict, procs: list[dict]) -> list[dict]:
    return [p for p in procs if p["npu"] == chip["npu"] and (p["chip"] is None or p["chip"] == chip["chip"])]


def npu_card_checks(chips: list[dict], procs: list[dict], local_ranks: int) -> list[Check]:
    """Enough chips for the local ranks, one chip generation, then one check per chip: health, HBM, other
    processes on it."""
    names = sorted({c["name"] for c in chips})
    families = sorted({chip_family(c["name"]) for c in chips})
    out = [Check("NPU chips", f"{len(chips)} ({', '.join(names) or 'none'})", len(chips) >= local_ranks,
                 f"{local_ranks} local rank(s) need as many chips (DEVICE_ID 0..{local_ranks - 1})"
                 if len(chips) >= local_ranks else
                 f"this node runs {local_ranks} ranks, one per chip: use a host with {local_ranks} chips or lower "
                 "world_size / local_world_size"),
           Check("NPU generation", ", ".join(families) or "none", len(families) == 1,
                 "chip names from npu-smi (910B: Atlas A2 training; 910A: Atlas training series); the wheel's "
                 "custom kernels are built for 910B (lib/plugin/ascend/custom_ascendc_910b)" if len(families) == 1
                 else "one job on one kind of chip: these cards differ (npu-smi info names them)")]
    per_npu = {}
    for c in chips:
        per_npu[c["npu"]] = per_npu.get(c["npu"], 0) + 1
    for c in chips:
        mine = _procs_on(c, procs)
        label = f"NPU {c['npu']}" + (f" chip {c['chip']}" if per_npu[c["npu"]] > 1 else "")
        users = ", ".join(f"pid {p['pid']} {p['name'] or '?'} {p['mem_mb']:.0f} MB" for p in mine)
        value = (f"{c['name']}, {c['health']}, {c['mem_kind']} {c['mem_used_mb']:.0f} / {c['mem_total_mb']:.0f} MB "
                 f"used" + (f"; in use by {users}" if users else ""))
        ok = c["health"].upper() == "OK" and not mine
        note = ("free" if ok else
                f"health {c['health']}: `npu-smi info -t health -i {c['npu']}` says why" if c["health"].upper() != "OK"
                else "another process holds this chip: a job here shares its HBM (stop it, or use other chips)")
        out.append(Check(label, value, ok, note))
    return out


def npu_smi_checks(local_ranks: int, run=None) -> tuple[list[Check], list[dict]]:
    """The NPU checks from ``npu-smi info`` (``run`` is ``subprocess.run``), and the chips it lists."""
    import subprocess

    run = run or subprocess.run
    try:
        proc = run(NPU_SMI, **_PIPE)
    except (OSError, subprocess.SubprocessError):
        return [Check("npu-smi", "not found", False, NO_NPU_SMI_FIX)], []
    chips, procs = parse_npu_smi(proc.stdout) if proc.returncode == 0 else ([], [])
    if not chips:
        err = (proc.stderr or proc.stdout or "").strip()[:200]
        return [Check("npu-smi", f"lists no chip ({err or 'rc ' + str(proc.returncode)})", False,
                      "the driver does not see a chip: check `npu-smi info` by hand")], []
    version = re.search(r"Version:\s*(\S+)", proc.stdout)
    return [Check("npu-smi", f"driver {version.group(1) if version else '?'}", True,
                  f"{len(chips)} chip(s) listed"), *npu_card_checks(chips, procs, local_ranks)], chips


def npu_free_hbm_gib(run=None) -> float | None:
    """The smallest chip's free HBM (total - used) in GiB (npu-smi), or None where there is no chip."""
    _, chips = npu_smi_checks(1, run)
    return min(c["mem_total_mb"] - c["mem_used_mb"] for c in chips) / 1024 if chips else None
