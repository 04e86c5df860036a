"""GPU pre-flight pieces on canned nvidia-smi outputs and library sets (no GPU here)."""

from types import SimpleNamespace

from helpers.envcheck import card_checks, card_memory_gib, gpu_checks, parse_nvidia_smi, wheel_gpu_plugins

A100 = "0, NVIDIA A100-SXM4-40GB, 8.0, 40960, 3, 0, 535.104.05\n1, NVIDIA A100-SXM4-40GB, 8.0, 40960, 3, 0, 535.104.05\n"
H100 = "0, NVIDIA H100 80GB HBM3, 9.0, 81559, 2, 0, 550.54.15\n"
BUSY = "0, Tesla V100-SXM2-16GB, 7.0, 16384, 15000, 97, 470.57.02\n"
CUDA116 = {"libcublas.so.11", "libcuda.so.1", "libcudart.so.11.0", "libcudnn.so.8", "libcufft.so.10",
           "libcurand.so.10", "libcusolver.so.11", "libcusparse.so.11", "libnvrtc.so.11.2"}
CUDA12_ONLY = {"libcuda.so.1", "libcudart.so.12", "libcublas.so.12", "libcudnn.so.9", "libnvrtc.so.12"}
PLUGINS = {"11.1": sorted(CUDA116 - {"libnvrtc.so.11.2"} | {"libnvrtc.so.11.1"}), "11.6": sorted(CUDA116)}


def smi(text, rc=0):
    return lambda cmd: SimpleNamespace(returncode=rc, stdout=text, stderr="")


def test_wheel_ships_cuda_11_plugins_needing_cudnn_8():
    plugins = wheel_gpu_plugins()
    assert set(plugins) == {"11.1", "11.6"}
    assert all("libcudnn.so.8" in libs and "libcudart.so.11.0" in libs for libs in plugins.values())


def test_a100_with_cuda_11_6_libraries_passes():
    checks = gpu_checks(run=smi(A100), find=CUDA116.__contains__, plugins=PLUGINS)
    assert all(c.ok for c in checks), checks
    assert "11.6" in checks[-1].value and card_memory_gib(run=smi(A100)) == 40.0


def test_cuda_12_only_host_is_told_what_to_install():
    lib = gpu_checks(run=smi(A100), find=CUDA12_ONLY.__contains__, plugins=PLUGINS)[-1]
    assert not lib.ok and "libcudnn.so.8" in lib.value and "nvidia-cudnn-cu11<9" in lib.note


def test_hopper_warns_about_ptx_and_busy_card_fails():
    (h100,) = card_checks(parse_nvidia_smi(H100))
    assert h100.ok and "PTX" in h100.note
    (v100,) = card_checks(parse_nvidia_smi(BUSY))
    assert not v100.ok and "in use" in v100.note


def test_no_driver_is_one_clear_failure():
    def missing(cmd):
        raise FileNotFoundError("nvidia-smi")

    checks = gpu_checks(run=missing, find=lambda s: False, plugins=PLUGINS)
    assert checks[0].name == "NVIDIA driver" and not checks[0].ok and "nvidia-smi" in checks[0].value
    assert card_memory_gib(run=missing) is None
