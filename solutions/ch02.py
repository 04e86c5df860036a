"""Chapter 02 exercise: ResNet-50, 224 px, global batch 2048 on 8 cards (256 per card), 16 GiB cards.

256 images do not fit on one card; split them into equal micro-batches that do. With the planner:

    from helpers.memory import plan_accumulation
    plan_accumulation("resnet50", 2048, 8, 16)      # -> (128, 2)

128 images per micro-step, 2 micro-steps per optimizer step (the largest divisor of 256 that fits).
"""

MICRO_BATCH_AND_STEPS = (128, 2)
