"""The Ascend host checks (helpers.preflight.ascend_host, helpers.preflight.npu_smi) on canned inputs: a fake CANN tree
(``compiler/version.info``), stub ``npu-smi`` / ``msprof`` scripts, canned load errors and link tables.

The npu-smi outputs below are built from the format in Huawei's npu-smi reference ("npu-smi info": per chip a row
``NPU Name | Health | Power(W) Temp(C) Hugepages-Usage(page)`` over ``Chip [Device] | Bus-Id | AICore(%)
Memory-Usage(MB) [HBM-Usage(MB)]``, then the ``NPU Chip | Process id | Process name | Process memory(MB)`` table)
and the 910A / 910B / A3 layouts users have posted (HBM-Usage column, two chips per NPU on A3).
"""

import os
import stat
from pathlib import Path

import pytest

from helpers.preflight import ascend_host as A
from helpers.preflight import npu_smi as N

BAR = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+\n"
EQ = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+\n"
HEAD_910B = ("+" + "-" * 96 + "+\n| npu-smi 24.1.0                   Version: 24.1.0" + " " * 48 + "|\n" + BAR +
             "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n"
             "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n" + EQ)


def chip_910b(npu, used=3400, health="OK", name="910B3"):
    return (f"| {npu:<5} {name:<19} | {health:<13} | 93.2        40                0    / 0             |\n"
            f"| 0                         | 0000:C{npu}:00.0  | 0           0    / 0          {used:<4} / 65536"
            "         |\n" + EQ)


def procs_table(busy: dict):
    rows = BAR + "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |\n"
    rows += EQ
    for npu in range(8):
        if npu in busy:
            pid, mem = busy[npu]
            rows += f"| {npu}       0                 | {pid:<13} | python                   | {mem:<23} |\n" + EQ
        else:
            rows += f"| No running processes found in NPU {npu}" + " " * 59 + "|\n" + EQ
    return rows


def npu_smi_910b(used=None, health=None, busy=None, name="910B3"):
    used, health = used or {}, health or {}
    return (HEAD_910B + "".join(chip_910b(i, used.get(i, 3400), health.get(i, "OK"), name) for i in range(8))
            + procs_table(busy or {}))


# the 910A layout (Atlas 800 training server, npu-smi 21.x): HBM-Usage in the chip row, no Hugepages column
NPU_SMI_910A = """+------------------------------------------------------------------------------------+
| npu-smi 21.0.2                   Version: 21.0.2                                   |
+----------------------+---------------+---------------------------------------------+
| NPU   Name           | Health        | Power(W)     Temp(C)                        |
| Chip                 | Bus-Id        | AICore(%)    Memory-Usage(MB) HBM-Usage(MB)   |
+======================+===============+=============================================+
| 1     910A           | OK            | 64.3         56                             |
| 0                    | 0000:3B:00.0  | 0            1809 / 15079    0    / 32768    |
+======================+===============+=============================================+
| 4     910A           | Alarm         | 65.6         58                             |
| 0                    | 0000:86:00.0  | 0            1809 / 15079    0    / 32768    |
+======================+===============+=============================================+
"""
# an A3 node: two chips per NPU, the chip row names chip and device id
NPU_SMI_A3 = (HEAD_910B.replace("| Chip     ", "| Chip  Dev") +
              "| 0     Ascend910           | OK            | 173.4       36                0    / 0             |\n"
              "| 0     0                   | 0000:9D:00.0  | 0           0    / 0          3430 / 65536         |\n"
              + BAR +
              "| 0     Ascend910           | OK            | -           37                0    / 0             |\n"
              "| 1     1                   | 0000:9F:00.0  | 0           0    / 0          3188 / 65536         |\n"
              + EQ + BAR +
              "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |\n"
              + EQ + "| 0       1                 | 4242          |                          | 50119                   |\n"
              + EQ)


def stub(folder: Path, name: str, output: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text("#!/bin/sh\ncat <<'EOF'\n" + output + "EOF\n")
    script.chmod(0o755)
    return script


def cann_tree(tmp_path, version="8.3.RC1") -> dict:
    """A CANN toolkit folder with compiler/version.info, msprof and its msprof.py, and the environment set_env.sh
    would give (the checker's expectations, read from it)."""
    home = tmp_path / "ascend-toolkit" / "latest"
    (home / "compiler").mkdir(parents=True)
    (home / "compiler" / "version.info").write_text(f"Version={version}\nversion_dir={version}\n")
    prof_bin = home / "tools" / "profiler" / "bin"
    stub(prof_bin, "msprof")
    script = home / "tools" / "profiler" / "profiler_tool" / "analysis" / "msprof" / "msprof.py"
    script.parent.mkdir(parents=True)
    script.write_text("")
    script.chmod(0o755)
    c = A.wheel_checker()
    return {"ASCEND_HOME_PATH": str(home), "ASCEND_OPP_PATH": f"{home}/opp",
            "PYTHONPATH": f"{home}/{c.python_path_check}", "LD_LIBRARY_PATH": f"/usr/local/Ascend/driver/lib64",
            "PATH": f"{prof_bin}:{os.environ['PATH']}"}


def by_name(checks):
    return {c.name: c for c in checks}


# ---------------------------------------------------------------- npu-smi
def test_parses_a_910b_node():
    text = npu_smi_910b(used={2: 41052}, busy={2: (1333928, 37709)}).replace("41052 / 65536", "41052/ 65536")
    chips, procs = N.parse_npu_smi(text)
    assert [c["npu"] for c in chips] == list(range(8)) and {c["name"] for c in chips} == {"910B3"}
    assert chips[2]["mem_kind"] == "HBM" and chips[2]["mem_used_mb"] == 41052 and chips[2]["mem_total_mb"] == 65536
    assert chips[0]["health"] == "OK" and chips[0]["bus_id"] == "0000:C0:00.0"
    assert procs == [dict(npu=2, chip=0, pid=1333928, name="python", mem_mb=37709.0)]


def test_parses_910a_and_a3_layouts():
    chips, procs = N.parse_npu_smi(NPU_SMI_910A)
    assert [(c["npu"], c["health"], c["mem_used_mb"], c["mem_total_mb"]) for c in chips] == [
        (1, "OK", 0, 32768), (4, "Alarm", 0, 32768)] and procs == []
    chips, procs = N.parse_npu_smi(NPU_SMI_A3)
    assert [(c["npu"], c["chip"], c["device"]) for c in chips] == [(0, 0, 0), (0, 1, 1)]
    assert procs == [dict(npu=0, chip=1, pid=4242, name="", mem_mb=50119.0)]


def test_card_checks_name_what_is_wrong():
    chips, procs = N.parse_npu_smi(npu_smi_910b(health={5: "Alarm"}, busy={2: (1333928, 37709)}))
    checks = by_name(N.npu_card_checks(chips, procs, local_ranks=8))
    assert checks["NPU chips"].ok and checks["NPU generation"].value == "910B"
    assert not checks["NPU 2"].ok and "pid 1333928" in checks["NPU 2"].value and "shares its HBM" in checks["NPU 2"].note
    assert not checks["NPU 5"].ok and "npu-smi info -t health -i 5" in checks["NPU 5"].note
    assert checks["NPU 0"].ok and "HBM 3400 / 65536 MB used" in checks["NPU 0"].value
    a3 = by_name(N.npu_card_checks(*N.parse_npu_smi(NPU_SMI_A3), local_ranks=8))
    assert not a3["NPU chips"].ok and "8 ranks" in a3["NPU chips"].note
    assert a3["NPU 0 chip 0"].ok and not a3["NPU 0 chip 1"].ok


def test_mixed_generations_fail():
    chips = N.parse_npu_smi(npu_smi_910b())[0] + N.parse_npu_smi(NPU_SMI_910A)[0]
    gen = by_name(N.npu_card_checks(chips, [], local_ranks=8))["NPU generation"]
    assert not gen.ok and gen.value == "910A, 910B"
    assert [N.chip_family(n) for n in ("910B1", "910ProB", "910A", "Ascend910")] == ["910B", "910A", "910A",
                                                                                        "Ascend910"]


def test_free_hbm_of_the_smallest_chip(tmp_path, monkeypatch):
    stub(tmp_path / "bin", "npu-smi", npu_smi_910b(used={3: 41052}))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert N.npu_free_hbm_gib() == pytest.approx((65536 - 41052) / 1024)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert N.npu_free_hbm_gib() is None


# ---------------------------------------------------------------- CANN, links, plugin, environment, msprof
def test_pass_path_with_a_fake_cann_and_a_stub_npu_smi(tmp_path, monkeypatch):
    env = cann_tree(tmp_path)
    stub(tmp_path / "bin", "npu-smi", npu_smi_910b())
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    checks = A.ascend_checks(8, env=env, status=(True, ""), device_count=lambda: 8, links=({}, {}))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    names = by_name(checks)
    assert names["CANN version"].value.startswith("8.3 ") and names["NPU chips"].value == "8 (910B3)"
    assert names["MindSpore Ascend devices"].value == "8" and names["inherited launch variables"].value == "none"
    assert names["msprof (chapter 04)"].value.endswith("tools/profiler/bin/msprof")


def test_a_cann_version_the_wheel_refuses_fails(tmp_path):
    checks = by_name(A.cann_checks(cann_tree(tmp_path, version="7.0.0")))
    bad = checks["CANN version"]
    assert not bad.ok and bad.value.startswith("7.0 ")
    assert ", ".join(A.wheel_checker().version) in bad.note and "set_env.sh" in bad.note


def test_no_cann_fails_with_set_env():
    checks = by_name(A.cann_checks({}) + A.cann_env_checks({}))
    assert not checks["ASCEND_HOME_PATH"].ok and checks["ASCEND_HOME_PATH"].note == A.SET_ENV_FIX
    assert not checks["CANN version"].ok
    assert not checks["ASCEND_OPP_PATH"].ok and "export ASCEND_OPP_PATH=$ASCEND_HOME_PATH/opp" in checks["ASCEND_OPP_PATH"].note
    tbe = checks["PYTHONPATH (TBE operators)"]
    assert not tbe.ok and "opp/built-in/op_impl/ai_core/tbe" in tbe.note
    assert not checks["LD_LIBRARY_PATH (driver)"].ok and "driver/lib64" in checks["LD_LIBRARY_PATH (driver)"].note


def test_link_walk_finds_what_the_loader_misses(tmp_path):
    lib = tmp_path / "mindspore" / "lib"
    (lib / "plugin" / "ascend").mkdir(parents=True)
    for f in ("plugin/libmindspore_ascend.so.2", "plugin/ascend/libd_collective.so", "plugin/ascend/libdvpp.so",
              "libmindspore_core.so"):
        (lib / f).write_text("")
    table = {"libmindspore_ascend.so.2": ["libmindspore_core.so", "libd_collective.so", "libge_runner.so",
                                          "libc.so.6"],
             "libd_collective.so": ["libhccl.so"], "libmindspore_core.so": ["libc.so.6", "ld-linux-x86-64.so.2"],
             "libdvpp.so": ["libacl_dvpp.so", "libge_runner.so"], "libc.so.6": []}
    core, extra = A.plugin_link_report(lib / "plugin", visible={"libc.so.6": "/lib/libc.so.6"},
                                       needed=lambda p: table[Path(p).name])
    assert core == {"libge_runner.so": {"libmindspore_ascend.so.2"}, "libhccl.so": {"libd_collective.so"}}
    assert extra == {"libacl_dvpp.so": {"libdvpp.so"}}
    checks = by_name(A.link_checks(core, extra))
    assert not checks["Ascend plugin libraries"].ok and "libge_runner.so (linked by libmindspore_ascend.so.2)" in \
        checks["Ascend plugin libraries"].value
    assert checks["Ascend optional libraries"].ok and checks["Ascend optional libraries"].warn


def test_the_real_plugin_links_are_found_or_reported():
    core, _ = A.plugin_link_report()
    from helpers.preflight.shared_libs import loader_visible

    visible = loader_visible()
    assert not set(core) & set(visible)
    assert A.GE_RUNNER in core or A.GE_RUNNER in visible


def test_plugin_status_quotes_the_ascend_lines_and_counts_devices():
    error = ("Load dynamic library: libmindspore_ascend.so.2 failed. libge_runner.so: cannot open shared object file\n"
             "Load dynamic library: libmindspore_gpu.so.11.6 failed. libcudnn.so.8: cannot open shared object file\n")
    loaded, why = A.ascend_status(read_error=lambda: error)
    assert "libge_runner.so" in why and "libcudnn" not in why
    check = by_name(A.plugin_checks(8, status=(False, why)))["MindSpore Ascend plugin"]
    assert not check.ok and "libge_runner.so" in check.note
    few = by_name(A.plugin_checks(8, status=(True, ""), device_count=lambda: 4))["MindSpore Ascend devices"]
    assert not few.ok and "ASCEND_RT_VISIBLE_DEVICES" in few.note


def test_this_machines_load_error_names_ge_runner():
    loaded, why = A.ascend_status()
    assert not loaded and A.GE_RUNNER in why


def test_stray_launch_variables():
    checks = by_name(A.stray_env_checks({"RANK_TABLE_FILE": "/old/rank_table_8pcs.json", "HCCL_DETERMINISTIC": "true",
                                         "PROFILING_MODE": "dynamic"}))
    assert not checks["env RANK_TABLE_FILE"].ok and checks["env RANK_TABLE_FILE"].note.startswith("unset RANK_TABLE_FILE")
    assert not checks["env PROFILING_MODE"].ok and "unset PROFILING_MODE" in checks["env PROFILING_MODE"].note
    det = checks["env HCCL_DETERMINISTIC"]
    assert det.ok and det.warn and det.note.startswith("unset HCCL_DETERMINISTIC")


def test_msprof_must_be_safe(tmp_path):
    env = cann_tree(tmp_path)
    assert A.msprof_check(env).ok
    exe = Path(env["PATH"].split(":")[0]) / "msprof"
    exe.chmod(exe.stat().st_mode | stat.S_IWGRP | stat.S_IWOTH)
    bad = A.msprof_check(env)
    assert not bad.ok and "group or others writable" in bad.value and "only chapter 04" in bad.note
    exe.chmod(0o755)
    if os.getuid() == 0:
        os.chown(exe, 12345, 12345)
        other = A.msprof_check(env)
        assert not other.ok and "owned by uid 12345" in other.value
    assert not A.msprof_check({"PATH": str(tmp_path / "empty")}).ok
