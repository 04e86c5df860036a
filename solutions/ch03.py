"""Chapter 03 exercises: a 100,000-class classifier on ResNet-50's 2048 features, 8 cards as 2 x 4; the
code cell's / mp.

1. Layout "2x4" (2 data-parallel groups of 4 model-parallel ranks). Each rank holds 100000 / 4 = 25,000
   class rows of (2048 weights + 1 bias), float32: 25000 * 2049 * 4 = 204,900,000 bytes (~195 MiB),
   instead of 819,600,000 bytes for the whole layer.
2. Rank r sits at (dp, mp) = divmod(r, 4); rank 5 is (1, 1). The same slice (mp index 1) is on ranks 1
   and 5: they average its gradient. A tuple of ints, rank 5 included (any order).
3. The code cell without the / mp in the CPU forward: the mp = 2 members of a group compute the same loss on
   the same gathered logits, and AllReduce's backward sums their 2 identical gradients, so each rank's gradient
   is 2 x the reference's slice ("gradient / reference" 2.0 on every rank; "loss - reference" is then the
   reference loss itself, as the cell still multiplies the loss by mp). The / mp undoes that sum: 2.
"""

LAYOUT_AND_BYTES = ("2x4", 204_900_000)
SAME_SLICE_AS_RANK5 = (1, 5)
WITHOUT_MP_DIVISION_FACTOR = 2
