"""Pins of the card-host pre-flight (helpers.preflight.gpu_plugin_choice, cuda_libraries, gpu_host, ascend_host) to the
installed wheel:
every string, file name and library the checks assume is read from the wheel's own files, and each pin can fail."""

import pytest

from helpers.preflight import ascend_host as A
from helpers.preflight import cuda_libraries as C
from helpers.preflight import gpu_host as G
from helpers.preflight import gpu_plugin_choice as P
from helpers.preflight.loader_search import read_search_paths
from helpers.preflight.shared_libs import mindspore_plugin_dir, needed_libraries
from tests.contract.wheel import assert_pinned, ms_dir

LOADER_STRINGS = [P.CUDA_HOME_UNSET_LOG, P.NVCC_REL, P.NVCC_KEY, P.NVCC_KEY_MISSING_LOG, P.NO_NVCC_LOG,
                  P.NO_PLUGIN_LOG, P.GPU_PLUGIN_STEM, P.CUDA_HOME_ENV]


@pytest.mark.parametrize("text", LOADER_STRINGS)
def test_the_gpu_plugin_loader_strings_are_in_hardware_abstract(text):
    assert_pinned(text, P.HARDWARE_ABSTRACT)


def test_the_plugin_files_the_checks_glob_are_the_wheels():
    files = P.wheel_gpu_plugin_files()
    assert files == sorted(p.name for p in mindspore_plugin_dir().glob("libmindspore_gpu.so.*"))
    assert [P.plugin_label(f) for f in files] == ["gpu11.1", "gpu11.6"]
    for f in files:
        assert (mindspore_plugin_dir() / P.plugin_label(f)).is_dir()          # the plugin's own folder (its NCCL)


@pytest.mark.parametrize("plugin", P.wheel_gpu_plugin_files())
def test_each_gpu_plugin_dlopens_the_unversioned_cupti(plugin):
    assert_pinned(C.CUPTI_SONAME + "\0", f"lib/plugin/{plugin}")              # the C string, not a versioned name


@pytest.mark.parametrize("plugin", P.wheel_gpu_plugin_files())
def test_each_gpu_plugin_has_an_rpath_ending_in_usr_local_cuda_and_no_runpath(plugin):
    """DT_RPATH without DT_RUNPATH: the loader searches these folders before LD_LIBRARY_PATH
    (helpers.preflight.cuda_libraries names the file that loads from that order)."""
    rpath, runpath = read_search_paths(mindspore_plugin_dir() / plugin)
    assert runpath == [], runpath
    assert rpath == ["$ORIGIN", "$ORIGIN/gpu", f"$ORIGIN/{P.plugin_label(plugin)}", "$ORIGIN/../", C.RPATH_CUDA_DIR]


def test_the_cuda_libraries_listed_are_read_from_the_plugins():
    plugins = G.wheel_gpu_plugins()
    assert plugins
    for version, libs in plugins.items():
        assert libs, version
        assert any(lib.startswith("libcudart.so.") for lib in libs) and any(lib.startswith("libcudnn.so.")
                                                                          for lib in libs)
        assert set(libs) <= set(needed_libraries(mindspore_plugin_dir() / f"libmindspore_gpu.so.{version}"))


def test_the_ascend_checker_reused_is_in_the_wheel():
    assert_pinned(f"class {A.CHECKER_CLASS}(", A.CHECK_VERSION_FILE)
    assert_pinned(f'+ "{A.VERSION_INFO}"', A.CHECK_VERSION_FILE)
    assert_pinned('if line.startswith("Version="):', A.CHECK_VERSION_FILE)
    checker = A.wheel_checker()
    assert checker.version and all(v.count(".") == 1 for v in checker.version)
    for attr in ("python_path_check", "ld_lib_path_check_fwk", "ascend_opp_path_check"):
        assert_pinned(f"self.{attr} = {getattr(checker, attr)!r}".replace("'", '"'), A.CHECK_VERSION_FILE)


def test_ge_runner_is_linked_by_the_ascend_plugin():
    plugin = f"lib/plugin/{A.ASCEND_PLUGIN}"
    assert A.GE_RUNNER in needed_libraries(ms_dir() / plugin)
    assert_pinned(A.GE_RUNNER, plugin)


STRAY_ENV_SOURCES = {"RANK_TABLE_FILE": "communication/management.py",
                     "MINDSPORE_HCCL_CONFIG_PATH": "communication/management.py",
                     "PROFILING_MODE": "profiler/common/constant.py",
                     "HCCL_DETERMINISTIC": "context.py"}


@pytest.mark.parametrize("var", sorted(A.STRAY_ENV))
def test_the_stray_launch_variables_are_read_by_mindspore(var):
    assert_pinned(f'"{var}"', STRAY_ENV_SOURCES[var])


def test_the_msprof_layout_and_device_count_api_are_the_wheels():
    from mindspore.profiler.common.msprof_cmd_tool import MsprofCmdTool

    assert_pinned(f'_MSPROF_PY_PATH = "{MsprofCmdTool._MSPROF_PY_PATH}"', "profiler/common/msprof_cmd_tool.py")
    assert_pinned("def check_path_is_owner_or_root(cls, path):", "profiler/common/path_manager.py")
    assert_pinned("def device_count():", "device_context/ascend/device.py")
