"""mindcv's training pipeline on one rank, as mindcv's ``train.py`` builds it (runs in mindcv's own venv).

``train.py`` is in mindcv's GitHub repository, not in the ``mindcv`` wheel, so this script makes its calls with
its defaults: the data-parallel context, ``create_dataset``, ``create_transforms(is_training=True)``,
``create_loader``, ``create_model``, ``create_loss("CE")``, ``create_optimizer(opt="momentum")``,
``create_trainer`` -> ``mindspore.Model``, ``model.train(..., dataset_sink_mode=True)``. The only additions are
our step-timing callback (``benchmarks._steptimer``), the config's ``threads_num`` and, with ``--fusion config``,
the config's ``comm_fusion`` in the parallel context, so the two trainers are compared, not two settings.

    run_job(cfg, worker=("-m", "benchmarks.mindcv_worker", [--model resnet18] [--sink 1] [--fusion config]),
            bin_dir=<mindcv venv>/bin)
"""

from __future__ import annotations

import argparse
import math
import sys


def main(argv=None) -> int:
    """Train one rank with mindcv's pipeline and write our metrics records; returns the exit code."""
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--sink", type=int, default=1)
    ap.add_argument("--fusion", choices=["default", "config"], default="default")
    args = ap.parse_args(argv)

    import mindspore as ms

    from benchmarks._rank_start import data_parallel_context, start_rank
    from helpers.train.worker import peak_rss_mb, recording_failures

    cfg, run_dir, rank, world, out = start_rank(args.config, graph=True)
    with recording_failures(out):
        import mindcv
        from mindcv.data import create_dataset, create_loader, create_transforms
        from mindcv.loss import create_loss
        from mindcv.models import create_model
        from mindcv.optim import create_optimizer
        from mindcv.utils import create_trainer, get_metrics, set_seed

        from benchmarks._steptimer import StepTimer
        from helpers.core.paths import resolve

        data_parallel_context(cfg, world, fused=args.fusion == "config")
        set_seed(cfg.seed, rank)
        dataset = create_dataset(name="", root=str(resolve(cfg.data_dir)), split="train", shuffle=True,
                                 num_shards=world, shard_id=rank, num_parallel_workers=cfg.dataset_workers)
        num_classes = dataset.num_classes()
        transforms = create_transforms(dataset_name="", is_training=True, image_resize=cfg.image_size)
        loader = create_loader(dataset=dataset, batch_size=cfg.batch_per_rank, drop_remainder=True,
                               is_training=True, num_classes=num_classes, transform=transforms,
                               num_parallel_workers=cfg.dataset_workers)
        network = create_model(model_name=args.model, num_classes=num_classes, pretrained=False)
        loss = create_loss(name="CE", reduction="mean", label_smoothing=0.0)
        optimizer = create_optimizer(network.trainable_params(), opt="momentum", lr=cfg.lr,
                                     weight_decay=cfg.weight_decay, momentum=cfg.momentum, loss_scale=1.0)
        model = create_trainer(network, loss, optimizer, metrics=get_metrics(num_classes), amp_level="O0",
                               amp_cast_list=None, loss_scale_type="fixed", loss_scale=1.0,
                               drop_overflow_update=False)
        timer = StepTimer(out, cfg.steps, cfg.batch_per_rank)
        epochs = math.ceil(cfg.steps / loader.get_dataset_size())
        model.train(epochs, loader, callbacks=[timer], dataset_sink_mode=bool(args.sink))
        n_params = sum(p.size for p in network.trainable_params())
        out.write("summary", **timer.summary(cfg.global_batch), peak_rss_mb=peak_rss_mb(), path="mindcv",
                  mindcv=mindcv.__version__, mindspore=ms.__version__, model=args.model,
                  trainable_params=int(n_params), dataset_sink_mode=bool(args.sink), fusion=args.fusion)
    return 0


if __name__ == "__main__":
    sys.exit(main())
