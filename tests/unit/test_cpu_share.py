"""helpers.core.cpu_share: finding the cpu cgroup, each rank's fair share, and a real quota that holds."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from helpers.core.config import job_config
from helpers.core.errors import ConfigError
from helpers.core.cpu_share import (CpuShareUnavailable, busy_seconds, cpu_cgroup, fair_share, join_rank_group, own_seconds,
                                     remove_job_groups)

V1_MOUNTS = ("35 25 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:12 - cgroup cgroup rw,cpu\n"
             "36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory\n")
V2_MOUNTS = "30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


def test_the_cpu_cgroup_is_found_in_v1_and_v2_layouts():
    assert cpu_cgroup(V1_MOUNTS, "4:memory:/x\n1:cpu:/user/42\n0::/\n") == (Path("/sys/fs/cgroup/cpu/user/42"), 1)
    assert cpu_cgroup(V2_MOUNTS, "0::/user.slice/session-3.scope\n") == (
        Path("/sys/fs/cgroup/user.slice/session-3.scope"), 2)
    with pytest.raises(CpuShareUnavailable, match="no cgroup cpu controller"):
        cpu_cgroup("36 25 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "4:memory:/x\n")


def test_a_rank_gets_a_fair_share_only_where_the_ranks_outnumber_the_cores():
    cfg = job_config("ci")
    assert fair_share(cfg, cores=2) == pytest.approx(0.25)
    assert fair_share(cfg, cores=8) is None
    assert fair_share(cfg.replace(world_size=2, global_batch=64), cores=2) is None
    with pytest.raises(ConfigError, match="rank_cpu_share"):
        cfg.replace(rank_cpu_share=0.0)


BURN = """
import sys, time
from helpers.core.cpu_share import CpuShareUnavailable, join_rank_group
try:
    share = join_rank_group(sys.argv[1], 3)
except CpuShareUnavailable as e:
    sys.exit(f"unavailable: {e}")
def burn(seconds):
    c0, t0 = time.process_time(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        pass
    return time.process_time() - c0
free = burn(0.6)
with share.held(0.25):
    held = burn(1.2)
print(free / 0.6, held / 1.2, burn(0.6) / 0.6)
"""


def test_a_held_share_caps_the_process_and_lifting_it_frees_it():
    job = f"test-{uuid.uuid4().hex[:8]}"
    run = subprocess.run([sys.executable, "-c", BURN, job], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    if run.stderr.startswith("unavailable:"):
        pytest.skip(f"no writable cgroup cpu controller here ({run.stderr.strip()})")
    assert run.returncode == 0, run.stderr
    out = run.stdout
    free, held, after = map(float, out.split())
    assert held < 0.35, f"held at 0.25 of a core, the process used {held:.2f}"
    assert free > 0.45 and after > 0.45, f"uncapped it used {free:.2f} and {after:.2f} of a core (2 cores, loaded?)"
    parent, _ = cpu_cgroup()
    assert (parent / f"ms_course_{job}" / "rank_3").is_dir()
    assert remove_job_groups(job) == 2 and not (parent / f"ms_course_{job}").exists()



OTHER = """
import sys, time
from helpers.core.cpu_share import CpuShareUnavailable, OtherWork, busy_seconds, join_rank_group
try:
    share = join_rank_group(sys.argv[1], 0)
except CpuShareUnavailable as e:
    sys.exit(f"unavailable: {e}")
other = OtherWork(share)
with other.during("own"):                # the job's own work: the machine's busy time less it
    b0, c0 = busy_seconds(), time.process_time()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.8:
        pass
    own, machine = time.process_time() - c0, busy_seconds() - b0
print("go", flush=True)
sys.stdin.readline()                     # the test's burner runs outside the job from here
with other.during("busy"):
    time.sleep(1.5)
print(own, machine, other.phases["own"][1], other.phases["busy"][1], other.cores()["other_cores_max"],
      other.phases["busy"][1] / other.phases["busy"][0])
"""
BURNER = ("import time\nt, c = time.monotonic(), time.process_time()\n"
          "while time.monotonic() - t < 2.5: pass\nprint(time.process_time() - c)")


def test_work_outside_the_job_is_counted_per_phase_and_the_job_own_work_is_not():
    job = f"test-{uuid.uuid4().hex[:8]}"
    rank = subprocess.Popen([sys.executable, "-c", OTHER, job], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        if rank.stdout.readline().strip() != "go":
            rank.wait(30)
            pytest.skip(f"no writable cgroup cpu controller here ({rank.stderr.read().strip()})")
        burner = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        rank.stdin.write("\n")
        rank.stdin.flush()
        out, err = rank.communicate(timeout=60)
        burned = float(burner.communicate(timeout=30)[0])
    finally:
        rank.kill()
        remove_job_groups(job)
    own, machine, other_own, other_busy, most, busy_cores = map(float, out.split())
    # whatever else this machine runs (the other test process), the job's own 0.8 s are left out, to a few ticks
    assert own > 0.3 and other_own == pytest.approx(machine - own, abs=0.1), (own, machine, other_own, err)
    # the burner's CPU in the 1.5 s window (it burned 2.5 s from 0.3 s before it) is counted
    assert other_busy >= min(burned, 1.5 * burned / 2.5) - 0.1, (other_busy, burned)
    assert most >= busy_cores


def test_the_course_own_process_tree_is_counted_as_its_own_work():
    # the launching kernel's tree (msrun, the ranks, any child) is the course's own work, not other work
    burner = subprocess.Popen([sys.executable, "-c", BURNER], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)
        own0, busy0 = own_seconds(os.getpid()), busy_seconds()
        time.sleep(1.0)
        own, busy = own_seconds(os.getpid()) - own0, busy_seconds() - busy0
    finally:
        burner.communicate(timeout=30)
    assert own > 0.3, "the burning child is in the tree"
    assert own <= busy + 0.05, (own, busy)
