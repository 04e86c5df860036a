"""MindSpore's high-level path on one rank: ``mindspore.train.Model(...).train(...)`` under ``DATA_PARALLEL``.

What a MindSpore user writes instead of our worker: the same network, data pipeline, loss, optimizer and global
batch, then ``Model(net, loss_fn, optimizer).train(...)``. Launched by msrun (``benchmarks.vs_model_train`` /
``benchmarks.knobs``); it writes our worker's metrics records through ``benchmarks._steptimer``, so both are read
back the same way. ``--fusion default``: the parallel context as the MindSpore tutorials write it (one AllReduce
per gradient); ``config``: plus the config's ``comm_fusion`` (the setting our presets use).

    run_job(cfg, worker=("-m", "benchmarks.model_train_worker", [--sink 0|1] [--fusion default|config]
                                                                [--mode graph|pynative]))
"""

from __future__ import annotations

import argparse
import math
import sys


def main(argv=None) -> int:
    """Train one rank with ``Model.train`` and write our metrics records; returns the exit code."""
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--sink", type=int, default=0)
    ap.add_argument("--fusion", choices=["default", "config"], default="default")
    ap.add_argument("--mode", choices=["graph", "pynative"], default="graph")
    args = ap.parse_args(argv)

    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Model

    from benchmarks._rank_start import data_parallel_context, start_rank
    from helpers.train.worker import peak_rss_mb, recording_failures

    cfg, run_dir, rank, world, out = start_rank(args.config, graph=args.mode == "graph")
    with recording_failures(out):
        data_parallel_context(cfg, world, fused=args.fusion == "config")
        import mindspore.dataset as ds

        from benchmarks._steptimer import StepTimer
        from helpers.train.data import build_dataset
        from helpers.train.image_folder import scan_split
        from helpers.train.models import build_model

        ds.config.set_seed(cfg.seed)
        num_classes = len(scan_split(cfg.data_dir, "train").classes)
        data = build_dataset(cfg, "train", rank, world)
        ms.set_seed(cfg.seed)
        net = build_model(cfg.arch, num_classes, cfg.width, cfg.stem, cfg.conv_impl)
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        opt = nn.Momentum(net.trainable_params(), cfg.lr, cfg.momentum, weight_decay=cfg.weight_decay)
        model = Model(net, loss_fn=loss, optimizer=opt)
        timer = StepTimer(out, cfg.steps, cfg.batch_per_rank)
        epochs = math.ceil(cfg.steps / data.get_dataset_size())
        model.train(epochs, data, callbacks=[timer], dataset_sink_mode=bool(args.sink))
        out.write("summary", **timer.summary(cfg.global_batch), peak_rss_mb=peak_rss_mb(), path="Model.train",
                  dataset_sink_mode=bool(args.sink), fusion=args.fusion, mode=args.mode,
                  effective_sink_mode=bool(args.sink) and cfg.device_target != "CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
