"""Chapter 02 exercise: ResNet-50, 224 px, global batch 2048 on 8 cards (256 per card), 16 GiB cards.

256 images do not fit on one card; split them into equal micro-batches that do. With the planner:

    from helpers.core.memory_planner import plan_accumulation
    plan_accumulation("resnet50", 2048, 8, 16)      # -> (128, 2)

128 images per micro-step, 2 micro-steps per optimizer step: the largest micro-batch that divides 256 and
fits (~11.2 GiB; 256 would need ~21.9 GiB), i.e. the fewest accumulation steps. Smaller splits such as
(64, 4) fit too but are not the answer: they run more, smaller micro-steps and give BatchNorm fewer
images. micro x steps is the per-card batch 256, not the global 2048.
"""

MICRO_BATCH_AND_STEPS = (128, 2)

# 2. The code cell rerun at micro-batch 2 x 8 micro-steps (ci, this 2-core machine): each rank peaked at 754-758 MB,
#    against 780-783 MB at 4 x 4. At so small a micro-batch a rank's memory is MindSpore's runtime, the model, its
#    gradients, momentum and accumulation buffers; the activations of 4 images at 64 px are a few percent of it.
MICRO_MEMORY_MB = 755
