"""The loader's search order (helpers.preflight.loader_search) and the CUPTI the GPU plugin really opens
(helpers.preflight.cuda_libraries), on files shaped like the real ones: a plugin with the wheel's DT_RPATH
(``$ORIGIN:$ORIGIN/gpu:$ORIGIN/gpu11.6:$ORIGIN/../:/usr/local/cuda/lib64``, the last folder moved into tmp_path)
and a ``/usr/local/cuda`` link to a CUDA 13 tree whose lib64 holds ``libcupti.so`` (as on this machine)."""

import os
import shutil
import subprocess
import sys

import pytest

from helpers.preflight.cuda_libraries import cupti_check, toolkit_root
from helpers.preflight.loader_search import CACHE, DEFAULT, LD_LIBRARY_PATH, RPATH, RUNPATH, SearchOrder, search_order
from tests.unit.elf_files import compile_so, write_elf

WHEEL_RPATH = "$ORIGIN:$ORIGIN/gpu:$ORIGIN/gpu11.6:$ORIGIN/../:{cuda}/lib64"


def loads(path):
    return object()


@pytest.fixture
def host(tmp_path):
    """A wheel's plugin folder, /usr/local/cuda -> cuda-13.0 (libcupti.so.13 in lib64) and a CUDA 11.6 toolkit."""
    root = tmp_path / "usr" / "local"
    cuda13 = root / "cuda-13.0"
    write_elf(cuda13 / "lib" / "libcupti.so", soname="libcupti.so.13")
    write_elf(cuda13 / "lib" / "libcudart.so.13", soname="libcudart.so.13")
    (cuda13 / "lib64").symlink_to("lib")
    (root / "cuda").symlink_to(cuda13)
    cuda11 = root / "cuda-11.6"
    write_elf(cuda11 / "extras" / "CUPTI" / "lib64" / "libcupti.so", soname="libcupti.so.11.6")
    plugin_dir = tmp_path / "site-packages" / "mindspore" / "lib" / "plugin"
    (plugin_dir / "gpu11.6").mkdir(parents=True)
    return dict(root=root, cuda=root / "cuda", cuda11=cuda11, plugin_dir=plugin_dir,
                cupti11=str(cuda11 / "extras" / "CUPTI" / "lib64"))


def plugin(host, **dyn):
    return write_elf(host["plugin_dir"] / "libmindspore_gpu.so.11.6", needed=["libcudnn.so.8", "libcudart.so.11.0"],
                     **dyn)


def test_the_rpath_copy_of_another_cuda_major_is_the_one_that_loads(host):
    lib = plugin(host, rpath=WHEEL_RPATH.format(cuda=host["cuda"]))
    search = search_order(lib, env={"LD_LIBRARY_PATH": host["cupti11"]}, cache={}, default_dirs=())
    found = search.find("libcupti.so")
    assert found.step == RPATH and found.path == f"{host['cuda']}/lib64/libcupti.so"
    check = cupti_check(search, 11, loads)
    assert not check.ok and "CUDA 13's (SONAME libcupti.so.13)" in check.value and "found on the RPATH" in check.value
    assert "no LD_LIBRARY_PATH can override it" in check.note
    assert f"point {host['cuda']} (now {host['root']}/cuda-13.0) at your CUDA 11 toolkit" in check.note
    assert f"ln -sfn $CUDA_HOME {host['cuda']};" in check.note
    assert f"--set-rpath '$ORIGIN:$ORIGIN/gpu:$ORIGIN/gpu11.6:$ORIGIN/../' {lib}" in check.note
    assert "export LD_LIBRARY_PATH=$CUDA_HOME/extras/CUPTI/lib64" in check.note


def test_the_same_folders_as_runpath_let_ld_library_path_win(host):
    search = search_order(plugin(host, runpath=WHEEL_RPATH.format(cuda=host["cuda"])),
                          env={"LD_LIBRARY_PATH": host["cupti11"]}, cache={}, default_dirs=())
    assert search.find("libcupti.so").step == LD_LIBRARY_PATH
    check = cupti_check(search, 11, loads)
    assert check.ok and "libcupti.so.11.6" in check.value


def test_cuda_11_behind_the_link_passes_through_the_rpath(host):
    host["cuda"].unlink()
    shutil.copytree(host["cuda11"] / "extras" / "CUPTI" / "lib64", host["cuda11"] / "lib64")
    host["cuda"].symlink_to(host["cuda11"])
    search = search_order(plugin(host, rpath=WHEEL_RPATH.format(cuda=host["cuda"])), env={}, cache={},
                          default_dirs=())
    check = cupti_check(search, 11, loads)
    assert check.ok and "found on the RPATH" in check.value


def test_a_wrong_copy_found_after_the_rpath_is_fixed_with_ld_library_path(host, tmp_path):
    cache = {"libcupti.so": str(host["root"] / "cuda-13.0" / "lib" / "libcupti.so")}
    search = search_order(plugin(host, rpath="$ORIGIN"), env={}, cache=cache, default_dirs=())
    check = cupti_check(search, 11, loads)
    assert not check.ok and "found on the ld.so.cache" in check.value
    assert check.note.startswith("export LD_LIBRARY_PATH=$CUDA_HOME/extras/CUPTI/lib64:$LD_LIBRARY_PATH (searched "
                                 "before the ld.so.cache step")


def test_no_cupti_anywhere_fails_with_the_extras_path(host):
    check = cupti_check(SearchOrder("/x/libmindspore_gpu.so.11.6", default_dirs=()), 11, loads)
    assert not check.ok and check.note.startswith("export LD_LIBRARY_PATH=$CUDA_HOME/extras/CUPTI/lib64")


def test_a_cupti_that_does_not_load_fails(host):
    def refuse(path):
        raise OSError(f"{path}: wrong ELF class")

    search = SearchOrder("/x/p.so", ld_library_path=(host["cupti11"],), default_dirs=())
    check = cupti_check(search, 11, refuse)
    assert not check.ok and "does not load" in check.value and "wrong ELF class" in check.value


def test_the_steps_come_in_the_loaders_order(tmp_path):
    dirs = {k: tmp_path / k for k in ("rpath", "ld", "runpath", "default")}
    for k in ("ld", "runpath", "default"):
        write_elf(dirs[k] / "libx.so.1", soname="libx.so.1")
    with_runpath = SearchOrder(str(tmp_path / "p.so"), rpath=(str(dirs["rpath"]),), runpath=(str(dirs["runpath"]),),
                               ld_library_path=(str(dirs["ld"]),), default_dirs=(str(dirs["default"]),))
    write_elf(dirs["rpath"] / "libx.so.1")
    assert [s for s, _ in with_runpath.folders()] == [LD_LIBRARY_PATH, RUNPATH]        # RUNPATH present: no RPATH
    assert with_runpath.find("libx.so.1").step == LD_LIBRARY_PATH
    only_rpath = SearchOrder(str(tmp_path / "p.so"), rpath=("$ORIGIN/rpath",), ld_library_path=(str(dirs["ld"]),))
    assert only_rpath.find("libx.so.1").path == f"{tmp_path}/rpath/libx.so.1"             # $ORIGIN expanded
    later = SearchOrder("/x/p.so", cache={"libx.so.1": "/cached/libx.so.1"}, default_dirs=(str(dirs["default"]),))
    assert later.find("libx.so.1").step == CACHE
    assert SearchOrder("/x/p.so", default_dirs=(str(dirs["default"]),)).find("libx.so.1").step == DEFAULT
    assert SearchOrder("/x/p.so", default_dirs=()).find("libx.so.1").path is None
    assert toolkit_root("/usr/local/cuda/lib64") == "/usr/local/cuda"


CUPTI_STUB = "int cupti_major(void) {{ return {major}; }}\n"
CALLER = ('#include <dlfcn.h>\nint probe(void) { void *h = dlopen("libcupti.so", RTLD_LAZY | RTLD_LOCAL); '
          'if (!h) return -1; int (*f)(void) = (int (*)(void))dlsym(h, "cupti_major"); return f ? f() : -2; }\n')


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc to build objects the real loader opens")
@pytest.mark.parametrize("dtags, major", [("--disable-new-dtags", 13), ("--enable-new-dtags", 11)])
def test_the_real_loader_opens_the_file_the_search_names(tmp_path, dtags, major):
    """glibc's own dlopen from a compiled caller (DT_RPATH or DT_RUNPATH, the wheel's folders) picks what
    SearchOrder.find names, with CUDA 11's CUPTI on LD_LIBRARY_PATH."""
    cuda13, cuda11 = tmp_path / "cuda-13.0" / "lib64", tmp_path / "cuda-11.6" / "extras" / "CUPTI" / "lib64"
    compile_so(cuda13 / "libcupti.so", CUPTI_STUB.format(major=13), "-soname,libcupti.so.13")
    compile_so(cuda11 / "libcupti.so", CUPTI_STUB.format(major=11), "-soname,libcupti.so.11.6")
    caller = compile_so(tmp_path / "plugin" / "libmindspore_gpu.so.11.6", CALLER, dtags,
                        f"-rpath,$ORIGIN:$ORIGIN/gpu:{cuda13}")
    env = {**os.environ, "LD_LIBRARY_PATH": str(cuda11)}
    probe = subprocess.run([sys.executable, "-c", "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).probe())",
                            str(caller)], env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == str(major), probe.stderr
    found = search_order(caller, env=env, cache={}, default_dirs=()).find("libcupti.so")
    assert found.path == str((cuda13 if major == 13 else cuda11) / "libcupti.so")
