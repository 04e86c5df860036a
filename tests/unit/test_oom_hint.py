"""The out-of-memory hint names the lever for what filled the memory (``helpers.job.plan``): accumulation when the
batch's activations dominate, the classifier split or optimizer sharding, with their bytes, when the state does."""

import re

from helpers.core.config import job_config
from helpers.core.memory_planner import estimate
from helpers.job.plan import memory_levers, oom_hint


def test_a_batch_that_does_not_fit_gets_the_accumulation_hint():
    est = estimate("resnet18", 64, 32, num_classes=10, width=0.125, stem="small")
    assert est.activation_bytes > est.model_state_bytes
    hint = memory_levers(est, 8, 64, 1)
    assert "micro_batch=16, accumulation_steps=4" in hint and "Split the classifier" not in hint


def test_a_classifier_that_does_not_fit_gets_the_split_with_its_bytes():
    classes, features = 200_000, 64                      # resnet18 x0.125: 512 x 0.125 features into the head
    est = estimate("resnet18", 2, 32, num_classes=classes, width=0.125, stem="small")
    hint = memory_levers(est, 8, 2, 1)
    assert "accumulation does not shrink it" in hint and "accumulation_steps=" not in hint
    head_mb = (features + 1) * classes * (4 + 4 + 4) / 2**20   # weight, gradient, momentum: float32 each
    saved = {int(mp): float(mb) for mb, mp in re.findall(r"(\d+) MB at mp=(\d+)", hint)}
    assert saved[2] == round(head_mb / 2) and saved[8] == round(head_mb * 7 / 8)
    assert f"saving {est.optimizer_bytes * 7 / 8 / 2**20:.0f} MB at 8 ranks" in hint


def test_the_job_hint_uses_the_configs_classes():
    cfg = job_config("ci").replace(num_classes=200_000, global_batch=16)
    assert "Split the classifier" in oom_hint(cfg)
    assert "accumulation_steps=" in oom_hint(job_config("ci"))


def test_on_two_ranks_the_split_is_named_once():
    est = estimate("resnet18", 2, 32, num_classes=200_000, width=0.125, stem="small")
    hint = memory_levers(est, 2, 2, 1)
    assert hint.count("at mp=") == 1 and "at 2 ranks" in hint
