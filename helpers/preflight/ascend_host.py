"""The Ascend host before an Ascend job: CANN's environment and version against what the wheel's own checker
accepts, the CANN and driver libraries the wheel's Ascend plugin links, MindSpore's plugin load error, the NPUs
(``helpers.preflight.npu_smi``), MindSpore's device count, launch variables the workers would inherit, and msprof.
Every external call is injectable (environment, command runner, load error, device count, library lookups).
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.preflight.machine_checks import Check
from helpers.preflight.npu_smi import npu_smi_checks
from helpers.preflight.shared_libs import loader_visible, mindspore_plugin_dir, needed_libraries

# The wheel's own CANN checker (mindspore/run_check/_check_version.py), reused rather than copied.
CHECK_VERSION_FILE = "run_check/_check_version.py"
CHECKER_CLASS = "AscendEnvChecker"
VERSION_INFO = "/compiler/version.info"        # AscendEnvChecker: ascend_home_path + "/compiler/version.info"
ASCEND_HOME_ENV = "ASCEND_HOME_PATH"
ASCEND_OPP_ENV = "ASCEND_OPP_PATH"
ASCEND_PLUGIN = "libmindspore_ascend.so.2"     # lib/plugin/; its neighbours in lib/plugin/ascend/
GE_RUNNER = "libge_runner.so"
SET_ENV_FIX = ("source <CANN install>/set_env.sh, e.g. source /usr/local/Ascend/ascend-toolkit/set_env.sh (it sets "
               "ASCEND_HOME_PATH and the CANN paths; put it in ~/.bashrc so msrun's workers inherit it)")
# The NPU driver's default install path (/usr/local/Ascend/driver); its libraries sit in lib64, lib64/common, lib64/driver.
DRIVER_FIX = ("export LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/common:"
              "/usr/local/Ascend/driver/lib64/driver:$LD_LIBRARY_PATH (the driver's default path; adjust to yours)")
# Variables an earlier job or shell may leave behind, which msrun's workers inherit: (fails?, why).
STRAY_ENV = {
    "RANK_TABLE_FILE": (True, "a rank table from a rank-table launch: MindSpore's init reads it "
                              "(communication/management.py) while msrun builds the cluster itself"),
    "MINDSPORE_HCCL_CONFIG_PATH": (True, "the rank table's other name, read the same way (communication/management.py)"),
    "PROFILING_MODE": (True, "msprof's dynamic-profiling switch: MindSpore's Ascend profiler refuses to start while it "
                             "is set (profiler/platform/npu_profiler.py: 'Please execute unset PROFILING_MODE')"),
    "HCCL_DETERMINISTIC": (False, "makes HCCL reductions deterministic and slower; MindSpore resets it only when "
                                  "deterministic mode is set (context.py)"),
}


def wheel_checker():
    """A fresh ``AscendEnvChecker`` of the installed wheel: its ``version`` list, path expectations, ``_read_version``."""
    from mindspore.run_check._check_version import AscendEnvChecker

    return AscendEnvChecker(None)


def cann_checks(env) -> list[Check]:
    """``ASCEND_HOME_PATH``, then the CANN version in its ``compiler/version.info`` against the versions the wheel's
    checker accepts (read by the checker's own ``_read_version``)."""
    checker = wheel_checker()
    accepted = ", ".join(checker.version)
    want = f"the MindSpore 2.10 wheel accepts CANN {accepted} (AscendEnvChecker.version in {CHECK_VERSION_FILE})"
    home = env.get(ASCEND_HOME_ENV, "")
    if not home:
        return [Check(ASCEND_HOME_ENV, "not set: no CANN in this environment", False, SET_ENV_FIX),
                Check("CANN version", "unknown (no ASCEND_HOME_PATH)", False, f"install CANN; {want}; {SET_ENV_FIX}")]
    out = [Check(ASCEND_HOME_ENV, home, Path(home).is_dir(),
                 "CANN toolkit" if Path(home).is_dir() else f"no such folder; {SET_ENV_FIX}")]
    info = home + VERSION_INFO
    if not Path(info).is_file():
        out.append(Check("CANN version", f"no {info}", False, f"ASCEND_HOME_PATH must be a CANN toolkit (MindSpore "
                         f"skips its own check without this file); {SET_ENV_FIX}; {want}"))
        return out
    found = checker._read_version(info)
    ok = found in checker.version
    out.append(Check("CANN version", f"{found or 'no Version= line'} ({info})", ok,
                     f"accepted: {accepted}" if ok else f"{want}: install one of them and {SET_ENV_FIX}"))
    return out


def cann_env_checks(env) -> list[Check]:
    """``ASCEND_OPP_PATH``, the TBE operators on ``PYTHONPATH`` and a ``lib64`` on ``LD_LIBRARY_PATH``: the
    substrings the wheel's checker looks for (``AscendEnvChecker._check_env``)."""
    c = wheel_checker()
    rules = [(ASCEND_OPP_ENV, ASCEND_OPP_ENV, c.ascend_opp_path_check, f"export {ASCEND_OPP_ENV}=$ASCEND_HOME_PATH/opp"),
             ("PYTHONPATH (TBE operators)", "PYTHONPATH", c.python_path_check,
              f"export PYTHONPATH=$ASCEND_HOME_PATH/{c.python_path_check}:$PYTHONPATH"),
             ("LD_LIBRARY_PATH (driver)", "LD_LIBRARY_PATH", c.ld_lib_path_check_fwk, DRIVER_FIX)]
    out = []
    for name, var, needle, fix in rules:
        value = env.get(var, "")
        hits = [p for p in value.split(":") if needle in p]
        out.append(Check(name, ", ".join(hits) if hits else f"no '{needle}' in {var} ({value or 'unset'})",
                         bool(hits), f"what MindSpore's checker expects ('{needle}' in {var})" if hits else
                         f"{fix}, or {SET_ENV_FIX}"))
    return out


def _walk_links(roots, shipped: dict, visible: dict, needed, seen: set) -> dict[str, set[str]]:
    """``{library not found: the files that link it}`` over the link closure of ``roots``: a name resolves to the
    wheel's file, else a file beside the one linking it, else what the host's loader finds."""
    missing: dict[str, set[str]] = {}
    stack = [Path(r) for r in roots]
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            names = needed(path)
        except (OSError, ValueError):
            continue
        for lib in names:
            if lib.startswith("ld-linux"):                  # the program interpreter, not a library to find
                continue
            beside = path.parent / lib
            where = shipped.get(lib) or (beside if beside.exists() else None) or visible.get(lib)
            if where is None:
                missing.setdefault(lib, set()).add(path.name)
            elif Path(where) not in seen:
                stack.append(Path(where))
    return missing


def plugin_link_report(plugin_dir=None, visible=None, needed=None) -> tuple[dict, dict]:
    """``(missing for the plugin's load, missing only for its lib/plugin/ascend neighbours)``, each
    ``{library: files that link it}``, read from the wheel's ELF files (never typed)."""
    plugin_dir = Path(plugin_dir or mindspore_plugin_dir())
    visible = loader_visible() if visible is None else visible
    needed = needed or needed_libraries
    shipped = {p.name: p for p in sorted(plugin_dir.parent.parent.rglob("*.so*")) if p.is_file()}
    seen: set = set()
    roots = [p for p in sorted(plugin_dir.glob("libmindspore*ascend*.so*")) if p.is_file()]
    core = _walk_links(roots, shipped, visible, needed, seen)
    extra: dict[str, set[str]] = {}
    for neighbour in sorted((plugin_dir / "ascend").glob("*.so")):
        for lib, users in _walk_links([neighbour], shipped, visible, needed, seen).items():
            if lib not in core:
                extra.setdefault(lib, set()).update(users)
    return core, extra


def link_checks(core: dict, extra: dict) -> list[Check]:
    """The plugin's CANN / driver libraries the loader cannot find (a failure), and those only its on-demand
    neighbours link (a warning)."""
    def listed(d):
        return "; ".join(f"{lib} (linked by {', '.join(sorted(users))})" for lib, users in sorted(d.items()))

    out = [Check("Ascend plugin libraries", f"not found: {listed(core)}" if core else
                 f"every library {ASCEND_PLUGIN} links is found", not core,
                 f"CANN's lib64 and the driver's libraries must be on LD_LIBRARY_PATH: {SET_ENV_FIX}; {DRIVER_FIX}"
                 if core else "read from the wheel's plugin with readelf -d")]
    if extra:
        out.append(Check("Ascend optional libraries", f"not found: {listed(extra)}", True,
                         "only the wheel files named load them, on demand (not this course's ResNet path)",
                         warn=True))
    return out


def ascend_status(read_error=None) -> tuple[bool, str]:
    """Whether MindSpore loaded its Ascend plugin, and the Ascend lines of its load error
    (``MSContext.load_plugin_error``)."""
    import mindspore  # noqa: F401 - the plugins are loaded at import
    from mindspore._c_expression import MSContext

    ctx = MSContext.get_instance()
    loaded = ctx.is_pkg_support_device("Ascend")
    text = ctx.load_plugin_error() if read_error is None else read_error()
    return loaded, "; ".join(ln for ln in text.splitlines() if "ascend" in ln.lower())


def plugin_checks(local_ranks: int, status=None, device_count=None) -> list[Check]:
    """MindSpore's verdict on its Ascend plugin (quoting its load error) and, when it loaded, its device count
    (``mindspore.device_context.ascend.device_count``) against the local ranks."""
    loaded, why = ascend_status() if status is None else status
    out = [Check("MindSpore Ascend plugin", "loaded" if loaded else "not loaded", loaded,
                 "device_target='Ascend' works" if loaded else
                 f"MindSpore's load error: {why or 'none recorded'}; fix the CANN checks above ({SET_ENV_FIX})")]
    if loaded:
        if device_count is None:
            import mindspore as ms

            device_count = ms.device_context.ascend.device_count
        n = device_count()
        out.append(Check("MindSpore Ascend devices", str(n), n >= local_ranks,
                         f"{local_ranks} local rank(s)" if n >= local_ranks else
                         f"MindSpore sees {n} device(s) for {local_ranks} local ranks: check ASCEND_RT_VISIBLE_DEVICES "
                         "and the container's /dev/davinci* devices"))
    return out


def stray_env_checks(env) -> list[Check]:
    """Launch variables set here that msrun's workers would inherit (fix: ``unset`` them)."""
    found = [(var, fails, why) for var, (fails, why) in STRAY_ENV.items() if env.get(var) is not None]
    if not found:
        return [Check("inherited launch variables", "none", True, f"none of {', '.join(STRAY_ENV)} is set")]
    return [Check(f"env {var}", env[var], not fails, f"unset {var}: {why}", warn=not fails)
            for var, fails, why in found]


def msprof_check(env, which=None) -> Check:
    """``msprof`` on PATH and safe as MindSpore's profiler requires it (``MsprofCmdTool._check_msprof_permission``):
    it and its ``msprof.py`` owned by root or you, executable, not group/others writable. Chapter 04 only."""
    import shutil

    from mindspore.profiler.common.msprof_cmd_tool import MsprofCmdTool
    from mindspore.profiler.common.path_manager import PathManager

    which = which or shutil.which
    name = "msprof (chapter 04)"
    exe = which(MsprofCmdTool._MSPROF_CMD, path=env.get("PATH", os.defpath))
    if not exe:
        return Check(name, "not on PATH", False, "export PATH=$ASCEND_TOOLKIT_HOME/bin:$PATH (where MindSpore looks for it, profiler/common/msprof_cmd_tool.py; set_env.sh sets it); "
                     "only chapter 04's Ascend profile needs msprof")
    real = os.path.realpath(exe)
    script = os.path.join(real.split("tools")[0], MsprofCmdTool._MSPROF_PY_PATH)   # as _get_msprof_script_path
    problems = [] if os.path.exists(script) else [f"no {script} (MindSpore: 'Failed to find msprof.py path')"]
    for path in [real] + ([script] if not problems else []):
        if not PathManager.check_path_is_owner_or_root(path):
            problems.append(f"{path} is owned by uid {os.stat(path).st_uid}, not root or you ({os.getuid()})")
        if not PathManager.check_path_is_executable(path):
            problems.append(f"{path} is not executable (chmod u+x {path})")
        try:
            PathManager.check_path_is_other_writable(path)
        except Exception as exc:  # noqa: BLE001 - ProfilerPathErrorException, MindSpore's own wording
            problems.append(str(exc))
    return Check(name, real if not problems else "; ".join(problems), not problems,
                 "MindSpore's Ascend profiler can run it" if not problems else
                 "only chapter 04 needs msprof: make it and msprof.py owned by root or you and not group/others "
                 "writable (chmod 755), as MindSpore's profiler checks")


def ascend_checks(local_ranks: int, env=None, run=None, status=None, device_count=None, links=None,
                  which=None) -> list[Check]:
    """Every Ascend check for ``local_ranks`` ranks on this node. Injectable: ``env`` (``os.environ``), ``run``
    (``subprocess.run``, for npu-smi), ``status`` (``(loaded, reason)``), ``device_count``, ``links`` (the pair of
    :func:`plugin_link_report`), ``which`` (``shutil.which``)."""
    env = os.environ if env is None else env
    out = cann_checks(env) + cann_env_checks(env)
    out += link_checks(*(plugin_link_report() if links is None else links))
    out += plugin_checks(local_ranks, status, device_count)
    out += npu_smi_checks(local_ranks, run)[0]
    out += stray_env_checks(env)
    out.append(msprof_check(env, which))
    return out
