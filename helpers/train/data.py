"""The ImageNet-layout reader every chapter trains from (``<data_dir>/<split>/<class>/*.JPEG``).

``mindspore.dataset.ImageFolderDataset`` lists samples class by class (sorted folder names), then the
usual ResNet transforms. The same code reads ImageNet (``gpu8`` preset) and the offline digits stand-in,
so the ImageNet path is the one that is tested. Labels come from the folder listing, never from decoding.
"""

from __future__ import annotations

from pathlib import Path


from helpers.core.errors import DataError
from helpers.core.paths import resolve
from helpers.core.rehearsal import FAKE_IMAGENET_DIR
from helpers.train.image_folder import IMAGE_EXTENSIONS, FolderIndex, scan_split

STANDIN_DIR = "data/digits"
HEAVY_STANDIN_DIR = "data/digits-heavy"     # chapter 01's: classes 8 and 9 cost a 1448 px decode to read
HEAVY_CLASSES, HEAVY_SIZE = (8, 9), 1448
IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def ensure_standin(data_dir: str | Path = STANDIN_DIR, size: int = 32) -> Path:
    """Write the digits stand-in (the heavy-class one at ``HEAVY_STANDIN_DIR``) if it is not there yet (seconds),
    and return its folder."""
    from data_prep.digits import write_digits

    path = resolve(data_dir)
    heavy = dict(heavy_classes=HEAVY_CLASSES, heavy_size=HEAVY_SIZE) if path == resolve(HEAVY_STANDIN_DIR) else {}
    write_digits(path, size=size, **heavy)
    return path


def is_standin(data_dir: str | Path) -> bool:
    """Whether ``data_dir`` names one of the course's own digits stand-ins (made on demand)."""
    return any(Path(data_dir) == Path(d) or resolve(data_dir) == resolve(d) for d in (STANDIN_DIR, HEAVY_STANDIN_DIR))


def ensure_fake_imagenet(data_dir: str | Path = FAKE_IMAGENET_DIR) -> Path:
    """Write the rehearsal's generated ImageNet-layout tree if missing, with its flat val/ sorted into class folders
    by the same one-command fix a user runs on real ImageNet (``data_prep.imagenet_val``). The sorting happens
    before the tree is renamed into place, so two course runs starting at once never see (or move files in)
    a half-sorted val/."""
    from data_prep.fake_imagenet import write_fake_imagenet

    root = resolve(data_dir)
    write_fake_imagenet(root, sort_val=True)
    return root


def prepare_data(cfg) -> FolderIndex:
    """Before launch: make the stand-in when the config points at it, then index and check the train split
    (and val/ when ``cfg.evaluate``): layout, class lists, and every image's bytes (``check_images``)."""
    if is_standin(cfg.data_dir):
        ensure_standin(cfg.data_dir)
    elif getattr(cfg, "rehearsal", False) and resolve(cfg.data_dir) == resolve(FAKE_IMAGENET_DIR):
        ensure_fake_imagenet(cfg.data_dir)
    index = scan_split(cfg.data_dir, "train")
    splits = ("train", "val") if cfg.evaluate else ("train",)
    if cfg.evaluate:
        check_val(cfg.data_dir, index.classes)
    if check_images(cfg, splits):                  # files were set aside: index what is left
        index = scan_split(cfg.data_dir, "train")
        if cfg.evaluate:
            check_val(cfg.data_dir, index.classes)
    per_rank = len(index.labels) // cfg.world_size
    if per_rank < cfg.batch_per_rank:
        raise DataError(f"{index.root}: {len(index.labels)} images give each of {cfg.world_size} ranks "
                        f"{per_rank}, fewer than one batch of {cfg.batch_per_rank}")
    return index


def check_val(data_dir: str | Path, train_classes: tuple[str, ...]) -> FolderIndex:
    """For ``evaluate=True``: val/ is there, sorted into class folders (the pre-flight's layout findings),
    and holds the same classes as train/; otherwise a DataError naming the difference and the fix."""
    from helpers.train.folder_checks import APPLEDOUBLE, check_imagenet_layout, class_difference

    failed = [f for f in check_imagenet_layout(data_dir, splits=("val",), images=False)
              if not f["ok"] and APPLEDOUBLE not in f["check"]]    # '._' files: check_images names them
    if failed:
        raise DataError("evaluate=True reads val/, which is not usable: " + "; ".join(
            f"{f['check']} {f['value']} (fix: {f['fix']})" for f in failed) + " (or set evaluate=False)")
    val = scan_split(data_dir, "val")
    diff = class_difference(train_classes, val.classes)
    if diff:
        raise DataError(f"evaluate=True: {val.root} and {resolve(data_dir) / 'train'} hold different classes: "
                        f"{diff}. val/ must hold the same class folders as train/ (or set evaluate=False)")
    return val


def check_images(cfg, splits=("train",)) -> bool:
    """Every image file of ``splits`` checked by its bytes (``helpers.train.image_checks``). With
    ``cfg.bad_images == "stop"`` (default) a bad file raises DataError naming it; with ``"set_aside"`` the
    bad files are moved to ``<data_dir>/_set_aside/`` (not deleted). Returns whether any file was moved."""
    from helpers.core.errors import ConfigError
    from helpers.train.image_checks import SET_ASIDE, describe, find_bad_images, fix_text, set_aside

    mode = getattr(cfg, "bad_images", "stop")
    if mode not in ("stop", "set_aside"):
        raise ConfigError(f"bad_images: must be 'stop' or 'set_aside' (got {mode!r})")
    root = resolve(cfg.data_dir)
    bad = [b for split in splits for b in find_bad_images(root / split)]
    if not bad:
        return False
    if mode == "stop":
        raise DataError(f"{root}: {describe(bad)}\n  fix: {fix_text(root)}")
    moved = set_aside(bad, root)
    print(f"set aside {len(moved)} corrupt or truncated image{'s' * (len(moved) != 1)} "
          f"(moved, not deleted) to {root / SET_ASIDE}; training without them")
    return True


def _transforms(image_size: int, train: bool, imagenet_stem: bool):
    import mindspore.dataset.vision as vision

    if imagenet_stem and train:
        ops = [vision.RandomCropDecodeResize(image_size), vision.RandomHorizontalFlip()]
    elif imagenet_stem:
        ops = [vision.Decode(), vision.Resize(int(image_size * 256 / 224)), vision.CenterCrop(image_size)]
    else:
        ops = [vision.Decode(), vision.Resize((image_size, image_size))]
    return ops + [vision.Normalize(IMAGENET_MEAN, IMAGENET_STD), vision.HWC2CHW()]


def train_sharding(cfg, rank: int, world_size: int) -> dict:
    """How one rank reads the train split, by ``cfg.sampler`` (the four strategies of chapter 01):

    - ``distributed_shuffle`` / ``distributed``: MindSpore's own sharding (``num_shards``/``shard_id``, an
      interleaving ``DistributedSampler``) with ``shuffle`` True / False;
    - ``contiguous``: the naive split the source blog describes: rank r reads the r-th consecutive block of
      the (class-sorted) listing, in order (``SubsetSampler``);
    - ``stratified``: ``helpers.train.sampler.StratifiedDistributedSampler``, labels from the folder listing, or
      with ``cfg.sampler_code`` the sampler class a notebook cell wrote.
    """
    import mindspore.dataset as ds

    from helpers.train.sampler import StratifiedDistributedSampler, sampler_class, shard_indices

    if cfg.sampler in ("distributed_shuffle", "distributed"):
        return dict(num_shards=world_size, shard_id=rank, shuffle=cfg.sampler == "distributed_shuffle")
    if cfg.sampler == "contiguous":
        labels = scan_split(cfg.data_dir, "train").labels
        (block,) = shard_indices("contiguous", labels, world_size, cfg.seed, shards=[rank])
        return dict(sampler=ds.SubsetSampler(block.tolist()))
    if cfg.sampler_code:       # the class a notebook cell wrote (chapter 01): (labels, num_shards, shard_id, seed)
        return dict(sampler=sampler_class(cfg.sampler_code)(scan_split(cfg.data_dir, "train").labels, world_size,
                                                            rank, cfg.seed))
    return dict(sampler=StratifiedDistributedSampler.from_image_folder(
        resolve(cfg.data_dir) / "train", world_size, rank, seed=cfg.seed, global_batch=cfg.global_batch))


def build_dataset(cfg, split: str, rank: int, world_size: int, sampler=None, batch_size: int | None = None,
                  drop_remainder: bool = True):
    """A batched ``ImageFolderDataset`` for one rank.

    The train split is sharded by ``cfg.sampler`` (``train_sharding``); the held-out split by MindSpore's
    ``num_shards``/``shard_id`` without shuffling. An explicit ``sampler`` overrides both.
    """
    import mindspore as ms
    import mindspore.dataset as ds
    import mindspore.dataset.transforms as T

    root = resolve(cfg.data_dir) / split
    train = split == "train"
    kwargs = dict(num_parallel_workers=cfg.dataset_workers, decode=False, extensions=list(IMAGE_EXTENSIONS))
    if sampler is not None:
        kwargs["sampler"] = sampler
    elif train:
        kwargs.update(train_sharding(cfg, rank, world_size))
    else:
        kwargs.update(num_shards=world_size, shard_id=rank, shuffle=False)
    data = ds.ImageFolderDataset(str(root), **kwargs)
    data = data.map(_transforms(cfg.image_size, train, cfg.stem == "imagenet"), input_columns="image",
                    num_parallel_workers=cfg.dataset_workers)
    data = data.map(T.TypeCast(ms.int32), input_columns="label")
    return data.batch(batch_size or cfg.batch_per_rank, drop_remainder=drop_remainder)
