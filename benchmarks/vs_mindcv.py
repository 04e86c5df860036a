"""Our worker vs mindcv's trainer (the MindSpore model zoo, ``mindcv`` on PyPI), 8 ranks via msrun.

mindcv lives in its own environment (``--venv``, default ``/work/venv-mindcv``; ``--setup`` creates it), never in
requirements.txt; ``benchmarks/mindcv_worker.py`` makes its ``train.py``'s calls. Both sides train the full
ResNet-18 (mindcv's models take no width multiplier) at the preset's image size and global batch. Equal terms
(the goal): ``ours`` with ``nn.Conv2d`` like mindcv's model vs ``mindcv_fused``, mindcv given our comm fusion.
On request (``--variants``): ``ours_im2col`` (the preset's convolution), ``mindcv`` as train.py runs it.
Alternating runs, steady img/s as in ``benchmarks.vs_model_train``; no ratio if mindcv cannot be imported.

    python -m benchmarks.vs_mindcv [--preset ci] [--steps 6] [--repeats 3] [--setup] [--variants ... mindcv]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._jobs import SKIP_STEPS, alternate, job_record, medians, save
from helpers.core.config import job_config

VENV = "/work/venv-mindcv"
SCRIPT = ("-m", "benchmarks.mindcv_worker", "--model", "resnet18", "--sink", "1")
VARIANTS = ("ours", "mindcv_fused", "ours_im2col", "mindcv")
GOAL_VARIANTS = ["ours", "mindcv_fused"]   # full-width ResNet-18 jobs are slow on 2 cores: the info ones on request


def setup_venv(venv: str) -> str:
    """A fresh venv with the same MindSpore as ours, mindcv and numpy < 2 (numpy 2 breaks mindspore.dataset)."""
    import mindspore

    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([f"{venv}/bin/pip", "install", "-q", f"mindspore=={mindspore.__version__}", "mindcv",
                    "numpy>=1.25,<2", "psutil"], check=True)
    return venv


def probe(venv: str) -> dict:
    """Versions in mindcv's environment, or why it is unusable."""
    py = Path(venv) / "bin" / "python"
    if not py.exists():
        return {"ok": False, "error": f"{py} does not exist (run with --setup)"}
    code = ("import json, mindspore, mindcv; from mindcv.models import create_model; "
            "print(json.dumps({'mindspore': mindspore.__version__, 'mindcv': mindcv.__version__}))")
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env={"GLOG_v": "3", "PATH": "/usr/bin:/bin"})
    if r.returncode:
        return {"ok": False, "error": r.stderr.strip()[-2000:]}
    import json

    return {"ok": True, **json.loads(r.stdout.strip().splitlines()[-1])}


def main(argv=None) -> dict:
    """Alternate our worker and mindcv's trainer on full ResNet-18; save ``vs_mindcv.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", nargs="*", default=GOAL_VARIANTS, choices=VARIANTS)
    ap.add_argument("--venv", default=VENV)
    ap.add_argument("--setup", action="store_true", help="create the mindcv venv first")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.setup and not Path(args.venv, "bin", "python").exists():
        setup_venv(args.venv)
    env = probe(args.venv)
    base = job_config(args.preset, chapter="bench", name="ours", arch="resnet18", width=1.0,
                      stem="imagenet", steps=args.steps, conv_impl="native")
    common = {"preset": args.preset, "arch": "resnet18 (full width, imagenet stem: mindcv's resnet18 layout)",
              "image_size": base.image_size, "world_size": base.world_size, "global_batch": base.global_batch,
              "steps": args.steps, "steady_from_step": SKIP_STEPS, "repeats": args.repeats,
              "mindcv_env": {"venv": args.venv, **env}, "goal": ">= 1.0 (ours / mindcv_fused)",
              "comm_fusion": base.comm_fusion, "variants": args.variants}
    if not env["ok"]:
        return save("vs_mindcv", {**common, "ratio": None, "goal_met": None,
                                  "error": "mindcv unusable: " + env["error"]}, args.out)
    root = Path(tempfile.mkdtemp(prefix="bench_vs_mindcv_"))
    mindcv_bin = str(Path(args.venv) / "bin")
    peer = base.replace(compile_cache=False)
    every = {
        "ours": job_record(base, root),
        "mindcv_fused": job_record(peer.replace(name="mindcv_fused"), root, (*SCRIPT, "--fusion", "config"),
                                   bin_dir=mindcv_bin),
        "ours_im2col": job_record(base.replace(name="ours_im2col", conv_impl="im2col"), root),
        "mindcv": job_record(peer.replace(name="mindcv"), root, SCRIPT, bin_dir=mindcv_bin),
    }
    variants = {name: every[name] for name in args.variants}
    runs = alternate(variants, args.repeats)
    med, best = medians(runs), medians(runs, "best_img_per_s")

    def over(m, a, b="mindcv_fused"):
        return m[a] / m[b] if m.get(a) and m.get(b) else None

    ratio = over(med, "ours")
    return save("vs_mindcv", {**common, "median_img_per_s": med, "best_step_img_per_s": best,
                              "ratio": ratio, "ratio_best_step": over(best, "ours"),
                              "equal_terms": ratio is not None,
                              "ours_over_mindcv_as_train_py": over(med, "ours", "mindcv"),
                              "ours_im2col_over_mindcv_fused": over(med, "ours_im2col"),
                              "goal_met": None if ratio is None else ratio >= 1.0,
                              "runs": runs, "run_root": str(root)}, args.out)


if __name__ == "__main__":
    main()
