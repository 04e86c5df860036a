"""The GPU host checks (helpers.preflight.gpu_host, helpers.preflight.gpu_plugin_choice) on canned nvidia-smi /
ldconfig outputs and stub nvcc scripts (no GPU here), plus the installed wheel.

The nvidia-smi lines are what ``SMI_QUERY`` (``--format=csv,noheader,nounits``) prints: index, name, compute_cap,
memory.total (MiB), memory.used (MiB), utilization.gpu (%), driver_version.
"""

import subprocess
import time
from types import SimpleNamespace

import pytest

from helpers.preflight import cuda_libraries as C
from helpers.preflight import gpu_host as E
from helpers.preflight import gpu_plugin_choice as P
from helpers.preflight import shared_libs as L
from helpers.preflight.gpu_host import card_checks, card_memory_gib, gpu_checks, parse_nvidia_smi
from helpers.preflight.loader_search import SearchOrder, search_order
from helpers.preflight.shared_libs import parse_ldconfig
from tests.unit.elf_files import write_elf

A100 = "0, NVIDIA A100-SXM4-40GB, 8.0, 40960, 3, 0, 535.104.05\n1, NVIDIA A100-SXM4-40GB, 8.0, 40960, 3, 0, 535.104.05\n"
H100 = "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 2, 0, 550.54.15\n"
BUSY = ("0, Tesla V100-SXM2-16GB, 7.0, 16384, 15000, 97, 470.57.02\n"
        "1, Tesla V100-SXM2-16GB, 7.0, 16384, 4, 0, 470.57.02\n")
# the CUDA 11.6 plugin's DT_NEEDED (readelf -d lib/plugin/libmindspore_gpu.so.11.6 of the installed 2.10 wheel)
PLUGIN_116 = ["libcublas.so.11", "libcuda.so.1", "libcudart.so.11.0", "libcudnn.so.8", "libcufft.so.10",
              "libcurand.so.10", "libcusolver.so.11", "libcusparse.so.11", "libnvrtc.so.11.2"]
PLUGINS = {"11.1": [x if x != "libnvrtc.so.11.2" else "libnvrtc.so.11.1" for x in PLUGIN_116], "11.6": PLUGIN_116}
NCCL = {"11.1": "plugin/gpu11.1/libnccl.so.2", "11.6": "plugin/gpu11.6/libnccl.so.2"}
FILES = ["libmindspore_gpu.so.11.1", "libmindspore_gpu.so.11.6"]
# `nvcc --version` of the CUDA 11.6.2 toolkit (its last line names the build)
NVCC_116 = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2022 NVIDIA Corporation\n"
            "Built on Tue_Mar__8_18:18:20_PST_2022\nCuda compilation tools, release 11.6, V11.6.124\n"
            "Build cuda_11.6.r11.6/compiler.31057947_0\n")
NVCC_122 = NVCC_116.replace("release 11.6, V11.6.124", "release 12.2, V12.2.140")


def ldconfig_text(libs):
    rows = "".join(f"\t{n} (libc6,x86-64) => /usr/local/cuda/lib64/{n}\n" for n in sorted(libs))
    return f"{len(libs)} libs found in cache `/etc/ld.so.cache'\n" + rows


LDCONFIG_116 = ldconfig_text(set(PLUGIN_116) | {"libz.so.1", "libcupti.so"})
LDCONFIG_CUDA12 = ldconfig_text({"libcuda.so.1", "libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12",
                                 "libcudnn.so.9", "libnvrtc.so.12", "libcufft.so.11", "libcurand.so.10",
                                 "libcusolver.so.11", "libcusparse.so.12", "libnccl.so.2", "libcupti.so"})


def fake_run(smi=None, ldconfig="", cupti_soname="libcupti.so.11.6"):
    """subprocess.run stand-in: nvidia-smi prints ``smi`` (None: not installed), ldconfig -p prints ``ldconfig``,
    readelf -d names ``cupti_soname``; a stub ``.../bin/nvcc`` really runs."""
    def run(cmd, **kw):
        if cmd[0].endswith("nvidia-smi"):
            if smi is None:
                raise FileNotFoundError(2, "No such file or directory", "nvidia-smi")
            return SimpleNamespace(returncode=0, stdout=smi, stderr="")
        if cmd[0].endswith("ldconfig"):
            return SimpleNamespace(returncode=0, stdout=ldconfig, stderr="")
        if cmd[0] == "readelf":
            return SimpleNamespace(returncode=0, stdout=f" 0x0e (SONAME) Library soname: [{cupti_soname}]\n",
                                   stderr="")
        if cmd[0].endswith("/bin/nvcc"):
            return subprocess.run(cmd, **kw)
        raise AssertionError(f"unexpected command {cmd}")
    return run


def stub_cuda_home(tmp_path, nvcc_output):
    """A CUDA_HOME whose bin/nvcc is a shell script printing ``nvcc_output``."""
    (tmp_path / "bin").mkdir(parents=True, exist_ok=True)
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\ncat <<'EOF'\n" + nvcc_output + "EOF\n")
    nvcc.chmod(0o755)
    return str(tmp_path)


def loads(name):
    return object()


def cache_only(ldconfig):
    """``search_for``: a plugin whose RPATH holds nothing of CUDA, the host's libraries all in the loader cache."""
    return lambda version: SearchOrder(f"/wheel/plugin/libmindspore_gpu.so.{version}",
                                       cache=L.parse_ldconfig_paths(ldconfig), default_dirs=())


def checks_for(smi, ldconfig, ms_gpu=(False, ""), env=None, load=loads, soname="libcupti.so.11.6"):
    return {c.name: c for c in gpu_checks(run=fake_run(smi, ldconfig, soname), plugins=PLUGINS,
                                          search_for=cache_only(ldconfig), bundled_nccl=NCCL, ms_gpu=ms_gpu,
                                          env=env or {}, load_library=load, plugin_files=FILES)}


def test_parsers():
    cards = parse_nvidia_smi(A100 + "\n")
    assert [c["index"] for c in cards] == [0, 1] and cards[0]["memory_total_mib"] == 40960
    assert cards[0]["compute_cap"] == "8.0" and cards[0]["driver"] == "535.104.05"
    assert parse_nvidia_smi("0, Tesla T4, 7.5, 15360, 0, [N/A], 470.1\n")[0]["utilization"] == 0.0
    assert parse_ldconfig(LDCONFIG_CUDA12) >= {"libcudart.so.12", "libcudnn.so.9"}
    assert "libz.so.1" in parse_ldconfig(LDCONFIG_116)
    assert L.parse_ldconfig_paths(LDCONFIG_116)["libcupti.so"] == "/usr/local/cuda/lib64/libcupti.so"


def test_the_libraries_a_plugin_sees_merge_its_folders_and_the_cache(tmp_path):
    (tmp_path / "libcudnn.so.8").write_text("")
    (tmp_path / "libcurl.so.4").write_text("")
    search = SearchOrder("/p.so", ld_library_path=(str(tmp_path),),
                         cache=L.parse_ldconfig_paths(ldconfig_text({"libcudart.so.11.0", "libcups.so.2"})))
    assert E.cuda_sonames(search.visible()) == ["libcudart.so.11.0", "libcudnn.so.8"]


# ---------------------------------------------------------------- the loader's choice (issue 28, item 1)
def test_cuda_home_unset_fails_naming_the_variable_and_the_toolkit_route():
    checks = checks_for(A100, LDCONFIG_116, env={})
    home = checks["CUDA_HOME"]
    assert not home.ok and "not set" in home.value and "gpu11.1, gpu11.6" in home.value
    assert home.note.startswith("export CUDA_HOME=<a CUDA 11.x toolkit with bin/nvcc>")
    assert "nvidia-cuda-nvcc-cu11 ships ptxas only" in home.note
    assert "GPU plugin choice" not in checks and "nvcc" not in checks
    ms = checks["MindSpore GPU plugin"]
    assert not ms.ok and "CUDA_HOME" in ms.note


def test_nvcc_11_6_stub_names_the_gpu11_6_plugin(tmp_path):
    home = stub_cuda_home(tmp_path, NVCC_116)
    checks, version = P.cuda_home_checks({"CUDA_HOME": home})      # the real runner and the wheel's plugin files
    by = {c.name: c for c in checks}
    assert by["CUDA_HOME"].ok and by["nvcc"].ok and by["nvcc"].value.startswith("CUDA 11.6 ")
    choice = by["GPU plugin choice"]
    assert choice.ok and choice.value == "gpu11.6 (lib/plugin/libmindspore_gpu.so.11.6)" and "exact" in choice.note
    assert version == "11.6"


def test_cuda_12_nvcc_matches_no_plugin(tmp_path):
    home = stub_cuda_home(tmp_path, NVCC_122)
    by = {c.name: c for c in P.cuda_home_checks({"CUDA_HOME": home})[0]}
    choice = by["GPU plugin choice"]
    assert by["nvcc"].ok and "CUDA 12.2" in by["nvcc"].value
    assert not choice.ok and choice.value == "none"
    assert "no plugin matches CUDA 12.2" in choice.note and P.NO_PLUGIN_LOG in choice.note
    assert "export CUDA_HOME=<a CUDA 11.x toolkit" in choice.note


def test_cuda_home_without_nvcc_or_with_a_silent_nvcc_fails(tmp_path):
    by = {c.name: c for c in P.cuda_home_checks({"CUDA_HOME": str(tmp_path)}, files=FILES)[0]}
    assert not by["CUDA_HOME"].ok and "can not find nvcc file" in by["CUDA_HOME"].note
    home = stub_cuda_home(tmp_path, "nvcc: NVIDIA (R) Cuda compiler driver\n")
    by = {c.name: c for c in P.cuda_home_checks({"CUDA_HOME": home}, files=FILES)[0]}
    assert by["CUDA_HOME"].ok and not by["nvcc"].ok and "GPU plugin choice" not in by


def test_nvcc_version_is_read_like_the_loader_reads_it():
    assert P.nvcc_release(NVCC_116) == "11.6"
    assert P.nvcc_release("Cuda compilation tools, release 11.8, V11.8.89") == "11.8"
    assert P.nvcc_release("nvcc: NVIDIA (R) Cuda compiler driver\n") is None
    assert P.nvcc_release("Cuda compilation tools, release 11.6 V11.6.124") is None      # no comma
    assert P.nvcc_release("x" * 1000 + NVCC_116) is None                                  # past its 999-byte read


@pytest.mark.parametrize("cuda, picked", [("11.1", "libmindspore_gpu.so.11.1"), ("11.4", "libmindspore_gpu.so.11.1"),
                                          ("11.5", "libmindspore_gpu.so.11.1"), ("11.6", "libmindspore_gpu.so.11.6"),
                                          ("11.8", "libmindspore_gpu.so.11.6"), ("11.0", None), ("12.2", None),
                                          ("10.1", None)])
def test_plugin_choice_rule(cuda, picked):
    assert P.choose_gpu_plugin(cuda, list(reversed(FILES)))[0] == picked


def test_plugin_choice_details():
    assert P.version_float((11, 1)) == 11.5 and P.version_float((11, 6)) == 14.0      # the wheel's VersionToFloat
    assert P.plugin_version("libmindspore_gpu.so.11.6") == (11, 6) and P.plugin_version("libmindspore_gpu.so") is None
    assert P.choose_gpu_plugin("12.2", ["libmindspore_gpu.so.11.6"])[0] == "libmindspore_gpu.so.11.6"   # only one
    assert P.choose_gpu_plugin("12", FILES)[0] is None


# ---------------------------------------------------------------- CUPTI (issue 28, item 2; issue 45, item 1)
def test_cupti_that_does_not_load_fails_with_the_extras_path():
    def refuse(name):
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    check = C.cupti_check(SearchOrder("/p.so", cache={"libcupti.so": "/opt/libcupti.so"}, default_dirs=()), 11,
                          refuse)
    assert not check.ok and "libcupti.so" in check.value and "does not load" in check.value
    assert check.note.startswith("export LD_LIBRARY_PATH=$CUDA_HOME/extras/CUPTI/lib64:$LD_LIBRARY_PATH")
    assert "only chapter 04" in check.note


def test_cupti_of_another_cuda_major_fails_and_cuda_11_passes():
    search = SearchOrder("/p.so", cache={"libcupti.so": "/usr/local/cuda-13.0/lib/libcupti.so"}, default_dirs=())
    bad = C.cupti_check(search, 11, loads, fake_run(cupti_soname="libcupti.so.13"))
    assert not bad.ok and "CUDA 13's" in bad.value and "extras/CUPTI/lib64" in bad.note
    good = C.cupti_check(search, 11, loads, fake_run(cupti_soname="libcupti.so.11.6"))
    assert good.ok and "libcupti.so.11.6" in good.value


def test_soname_readers_agree():
    import shutil

    lib = L.mindspore_plugin_dir() / "gpu11.6" / "libnccl.so.2"
    assert L.soname(lib, run=lambda *a, **k: (_ for _ in ()).throw(OSError("no readelf"))) == "libnccl.so.2"
    if shutil.which("readelf"):
        assert L.soname(lib) == "libnccl.so.2"


# ---------------------------------------------------------------- the whole GPU report
def test_a100_with_cuda_11_6_toolkit_passes(tmp_path):
    checks = checks_for(A100, LDCONFIG_116, ms_gpu=(True, ""), env={"CUDA_HOME": stub_cuda_home(tmp_path, NVCC_116)})
    assert all(c.ok for c in checks.values()), checks
    assert list(checks) == ["NVIDIA driver", "GPU 0", "GPU 1", "CUDA_HOME", "nvcc", "GPU plugin choice",
                            "CUDA driver", "CUDA runtime", "cuDNN", "NCCL", "CUPTI (chapter 04)",
                            "MindSpore GPU plugin"]
    assert "CUDA 11.6" in checks["CUDA runtime"].value and "bundled" in checks["NCCL"].value
    assert card_memory_gib(run=fake_run(A100)) == 40.0


def test_libraries_are_judged_for_the_plugin_the_loader_picks():
    search = cache_only(ldconfig_text(PLUGINS["11.1"]))          # CUDA 11.1's runtime, while nvcc says 11.6
    searches = {v: search(v) for v in PLUGINS}
    rt = {c.name: c for c in E.cuda_library_checks(PLUGINS, searches, NCCL, chosen="11.6")}["CUDA runtime"]
    assert not rt.ok and "libnvrtc.so.11.2" in rt.value and "CUDA 11.6 plugin" in rt.value
    ok = {c.name: c for c in E.cuda_library_checks(PLUGINS, searches, NCCL)}["CUDA runtime"]
    assert ok.ok and "/usr/local/cuda/lib64 (ld.so.cache)" in ok.value


def test_cudnn_tar_installed_into_a_cuda_12_usr_local_cuda_loads_before_ld_library_path(tmp_path):
    """NVIDIA's cuDNN archive copied into /usr/local/cuda/lib64 (a CUDA 12 toolkit there): the plugin's RPATH finds
    it before the CUDA 11 toolkit on LD_LIBRARY_PATH, and the fix says LD_LIBRARY_PATH cannot change that."""
    cuda12 = tmp_path / "cuda-12.2" / "lib64"
    for name in ("libcudnn.so.8", "libcudart.so.12"):
        write_elf(cuda12 / name, soname=name)
    (tmp_path / "cuda").symlink_to(tmp_path / "cuda-12.2")
    cuda11 = tmp_path / "cuda-11.6" / "lib64"
    for name in PLUGIN_116:
        write_elf(cuda11 / name, soname=name)
    plugin = write_elf(tmp_path / "plugin" / "libmindspore_gpu.so.11.6", needed=PLUGIN_116,
                       rpath=f"$ORIGIN:$ORIGIN/gpu:$ORIGIN/gpu11.6:$ORIGIN/../:{tmp_path}/cuda/lib64")
    search = search_order(plugin, env={"LD_LIBRARY_PATH": str(cuda11)}, cache={}, default_dirs=())
    by = {c.name: c for c in E.cuda_library_checks({"11.6": PLUGIN_116}, {"11.6": search}, NCCL, chosen="11.6")}
    dnn = by["cuDNN"]
    assert not dnn.ok and f"loads from {tmp_path}/cuda/lib64/libcudnn.so.8 (found on the RPATH)" in dnn.value
    assert "CUDA 12's (its folder holds libcudart.so.12)" in dnn.value
    assert "no LD_LIBRARY_PATH can override it" in dnn.note and "export LD_LIBRARY_PATH=$CUDA_HOME/lib64" in dnn.note
    assert by["CUDA runtime"].ok and f"{cuda11} (LD_LIBRARY_PATH)" in by["CUDA runtime"].value


def test_cuda_12_only_host_is_led_to_a_cuda_11_toolkit(tmp_path):
    checks = checks_for(A100, LDCONFIG_CUDA12,
                        ms_gpu=(False, "Load dynamic library: libmindspore_gpu.so.11.6 failed. libcudnn.so.8: cannot "
                                       "open shared object file"),
                        env={"CUDA_HOME": stub_cuda_home(tmp_path, NVCC_122)})
    rt, dnn = checks["CUDA runtime"], checks["cuDNN"]
    assert not rt.ok and "libcudart.so.11.0" in rt.value and "libcudart.so.12" in rt.value
    assert not dnn.ok and "libcudnn.so.8" in dnn.value and "libcudnn.so.9" in dnn.value
    for note in (rt.note, dnn.note):
        assert "install a CUDA 11.x toolkit" in note and "export CUDA_HOME=" in note and "pip install" not in note
    assert not checks["GPU plugin choice"].ok
    assert checks["CUDA driver"].ok and checks["NCCL"].ok
    ms = checks["MindSpore GPU plugin"]
    assert not ms.ok and "libcudnn.so.8" in ms.note


def test_hopper_is_a_warning_with_its_source():
    (h100,) = card_checks(parse_nvidia_smi(H100))
    assert h100.ok and "PTX" in h100.note and "hopper-compatibility-guide" in h100.note
    (a100, _) = card_checks(parse_nvidia_smi(A100))
    assert "PTX" not in a100.note


def test_busy_card_fails_its_own_check_only():
    busy, free = card_checks(parse_nvidia_smi(BUSY))
    assert not busy.ok and "in use" in busy.note and "97% busy" in busy.value
    assert free.ok and free.note == "free"
    assert card_memory_gib(run=fake_run(BUSY)) == 16.0


def test_no_nvidia_smi_still_reports_the_cuda_path():
    checks = {c.name: c for c in gpu_checks(run=fake_run(None), plugins=PLUGINS, search_for=cache_only(""),
                                            bundled_nccl=NCCL, ms_gpu=(False, ""), env={}, load_library=loads,
                                            plugin_files=FILES)}
    assert not checks["NVIDIA driver"].ok and checks["NVIDIA driver"].value == "no NVIDIA driver (nvidia-smi not found)"
    assert not checks["CUDA_HOME"].ok and "CUPTI (chapter 04)" in checks and "GPU 0" not in checks
    assert card_memory_gib(run=fake_run(None)) is None


def test_wheel_ships_cuda_11_1_and_11_6_plugins_needing_cudnn_8():
    plugins = E.wheel_gpu_plugins()
    assert set(plugins) == {"11.1", "11.6"}
    assert all("libcudnn.so.8" in libs and "libcudart.so.11.0" in libs for libs in plugins.values())
    assert "libnvrtc.so.11.2" in plugins["11.6"] and "libnvrtc.so.11.1" in plugins["11.1"]
    assert set(E.wheel_bundled_nccl()) == {"11.1", "11.6"}
    assert P.wheel_gpu_plugin_files() == FILES


def test_pure_python_elf_reader_agrees_with_readelf():
    import shutil

    if not shutil.which("readelf"):
        pytest.skip("no readelf to compare with")
    lib = L.mindspore_plugin_dir() / "libmindspore_gpu.so.11.6"
    assert L.elf_needed(lib) == L.parse_needed(subprocess.run(["readelf", "-d", str(lib)], capture_output=True,
                                                              text=True).stdout)


def test_real_gpu_checks_on_this_machine_are_fast():
    t0 = time.monotonic()
    checks = gpu_checks()
    assert checks and time.monotonic() - t0 < 10
