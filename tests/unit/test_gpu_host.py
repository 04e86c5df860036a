"""The GPU host checks (helpers.job.gpu_host) on canned nvidia-smi / ldconfig outputs (no GPU here), plus the installed wheel.

The nvidia-smi lines are what ``SMI_QUERY`` (``--format=csv,noheader,nounits``) prints: index, name, compute_cap,
memory.total (MiB), memory.used (MiB), utilization.gpu (%), driver_version.
"""

import time
from types import SimpleNamespace

import pytest

from helpers.job import gpu_host as E
from helpers.job.gpu_host import card_checks, card_memory_gib, gpu_checks, parse_ldconfig, parse_nvidia_smi

A100 = "0, NVIDIA A100-SXM4-40GB, 8.0, 40960, 3, 0, 535.104.05\n1, NVIDIA A100-SXM4-40GB, 8.0, 40960, 3, 0, 535.104.05\n"
H100 = "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 2, 0, 550.54.15\n"
BUSY = ("0, Tesla V100-SXM2-16GB, 7.0, 16384, 15000, 97, 470.57.02\n"
        "1, Tesla V100-SXM2-16GB, 7.0, 16384, 4, 0, 470.57.02\n")
# the CUDA 11.6 plugin's DT_NEEDED (readelf -d lib/plugin/libmindspore_gpu.so.11.6 of the installed 2.10 wheel)
PLUGIN_116 = ["libcublas.so.11", "libcuda.so.1", "libcudart.so.11.0", "libcudnn.so.8", "libcufft.so.10",
              "libcurand.so.10", "libcusolver.so.11", "libcusparse.so.11", "libnvrtc.so.11.2"]
PLUGINS = {"11.1": [x if x != "libnvrtc.so.11.2" else "libnvrtc.so.11.1" for x in PLUGIN_116], "11.6": PLUGIN_116}
NCCL = {"11.1": "plugin/gpu11.1/libnccl.so.2", "11.6": "plugin/gpu11.6/libnccl.so.2"}


def ldconfig_text(libs):
    rows = "".join(f"\t{n} (libc6,x86-64) => /usr/local/cuda/lib64/{n}\n" for n in sorted(libs))
    return f"{len(libs)} libs found in cache `/etc/ld.so.cache'\n" + rows


LDCONFIG_116 = ldconfig_text(set(PLUGIN_116) - {"libcuda.so.1"} | {"libcuda.so.1", "libcudnn.so.8", "libz.so.1"})
LDCONFIG_CUDA12 = ldconfig_text({"libcuda.so.1", "libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12",
                                 "libcudnn.so.9", "libnvrtc.so.12", "libcufft.so.11", "libcurand.so.10",
                                 "libcusolver.so.11", "libcusparse.so.12", "libnccl.so.2"})


def fake_run(smi=None, ldconfig=""):
    """subprocess.run stand-in: nvidia-smi prints ``smi`` (None: not installed), ldconfig -p prints ``ldconfig``."""
    def run(cmd, **kw):
        if cmd[0].endswith("nvidia-smi"):
            if smi is None:
                raise FileNotFoundError(2, "No such file or directory", "nvidia-smi")
            return SimpleNamespace(returncode=0, stdout=smi, stderr="")
        if cmd[0].endswith("ldconfig"):
            return SimpleNamespace(returncode=0, stdout=ldconfig, stderr="")
        raise AssertionError(f"unexpected command {cmd}")
    return run


def no_find(name):
    return None


def checks_for(smi, ldconfig, find=no_find, ms_gpu=(False, "")):
    return {c.name: c for c in gpu_checks(run=fake_run(smi, ldconfig), find_library=find, plugins=PLUGINS,
                                          bundled_nccl=NCCL, ms_gpu=ms_gpu)}


def test_parsers():
    cards = parse_nvidia_smi(A100 + "\n")
    assert [c["index"] for c in cards] == [0, 1] and cards[0]["memory_total_mib"] == 40960
    assert cards[0]["compute_cap"] == "8.0" and cards[0]["driver"] == "535.104.05"
    assert parse_nvidia_smi("0, Tesla T4, 7.5, 15360, 0, [N/A], 470.1\n")[0]["utilization"] == 0.0
    assert parse_ldconfig(LDCONFIG_CUDA12) >= {"libcudart.so.12", "libcudnn.so.9"}
    assert "libz.so.1" in parse_ldconfig(LDCONFIG_116)


def test_host_libraries_merges_ldconfig_ld_library_path_and_find_library(tmp_path):
    (tmp_path / "libcudnn.so.8").write_text("")
    (tmp_path / "libcurl.so.4").write_text("")
    found = E.host_libraries(fake_run(ldconfig=ldconfig_text({"libcudart.so.11.0", "libcups.so.2"})),
                             {"nccl": "libnccl.so.2"}.get, ld_library_path=str(tmp_path))
    assert found == {"libcudart.so.11.0", "libcudnn.so.8", "libnccl.so.2"}


def test_a100_with_cuda_11_6_libraries_passes():
    checks = checks_for(A100, LDCONFIG_116, ms_gpu=(True, ""))
    assert all(c.ok for c in checks.values()), checks
    assert list(checks) == ["NVIDIA driver", "GPU 0", "GPU 1", "CUDA driver", "CUDA runtime", "cuDNN", "NCCL",
                            "MindSpore GPU plugin"]
    assert "CUDA 11.6" in checks["CUDA runtime"].value and "bundled" in checks["NCCL"].value
    assert card_memory_gib(run=fake_run(A100)) == 40.0


def test_cuda_12_only_host_is_told_what_to_install():
    checks = checks_for(A100, LDCONFIG_CUDA12, find={"cudart": "libcudart.so.12"}.get,
                        ms_gpu=(False, "Load dynamic library: libmindspore_gpu.so.11.6 failed. libcudnn.so.8: cannot "
                                       "open shared object file"))
    rt, dnn = checks["CUDA runtime"], checks["cuDNN"]
    assert not rt.ok and "libcudart.so.11.0" in rt.value and "libcudart.so.12" in rt.value
    assert not dnn.ok and "libcudnn.so.8" in dnn.value and "libcudnn.so.9" in dnn.value
    assert "CUDA 11.6 runtime and cuDNN 8" in rt.note and "nvidia-cuda-runtime-cu11" in rt.note
    assert "'nvidia-cudnn-cu11<9'" in dnn.note
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


def test_no_nvidia_smi_is_one_clean_failure():
    checks = gpu_checks(run=fake_run(None), find_library=no_find, plugins=PLUGINS, bundled_nccl=NCCL,
                        ms_gpu=(False, ""))
    assert len(checks) == 1
    assert checks[0].name == "NVIDIA driver" and not checks[0].ok
    assert checks[0].value == "no NVIDIA driver (nvidia-smi not found)"
    assert card_memory_gib(run=fake_run(None)) is None


def test_wheel_ships_cuda_11_1_and_11_6_plugins_needing_cudnn_8():
    plugins = E.wheel_gpu_plugins()
    assert set(plugins) == {"11.1", "11.6"}
    assert all("libcudnn.so.8" in libs and "libcudart.so.11.0" in libs for libs in plugins.values())
    assert "libnvrtc.so.11.2" in plugins["11.6"] and "libnvrtc.so.11.1" in plugins["11.1"]
    assert set(E.wheel_bundled_nccl()) == {"11.1", "11.6"}


def test_pure_python_elf_reader_agrees_with_readelf():
    import shutil
    import subprocess

    if not shutil.which("readelf"):
        pytest.skip("no readelf to compare with")
    lib = E._plugin_dir() / "libmindspore_gpu.so.11.6"
    assert E._elf_needed(lib) == E.parse_needed(subprocess.run(["readelf", "-d", str(lib)], capture_output=True,
                                                               text=True).stdout)


def test_real_gpu_checks_on_this_machine_are_fast():
    t0 = time.monotonic()
    checks = gpu_checks()
    assert checks and time.monotonic() - t0 < 10
