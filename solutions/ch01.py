"""Chapter 01 exercises: 10 classes x 40 images, class-sorted, 8 ranks.

1. contiguous split: 400 / 8 = 50 consecutive images per rank; rank 3 reads positions 150..199, i.e. the
   last 10 images of class 3 (120..159) and all 40 of class 4 (160..199): two classes only.
2. DistributedSampler(shuffle=False): rank k reads k, k+8, k+16, ...; a global step with 5 images per rank
   is positions 0..39 of the listing (8 ranks x 5), all from class 0: 1 class.
"""

RANK3_HISTOGRAM = [0, 0, 0, 10, 40, 0, 0, 0, 0, 0]
WORST_STEP_CLASSES = 1

# 3. The code cell's sampler with a block of `order` per rank instead of dealing it: rank 0's block of the digits
#    stand-in is class 0 alone (that class holds more images than one rank's share); the other ranks' blocks span
#    2-3 classes (measured at ci). Dealing gives every rank all 10.
BLOCK_SHARD_CLASSES = 1
