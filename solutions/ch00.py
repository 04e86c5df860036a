"""Chapter 00 exercises: ranks, msrun flags, and the code cell without its gradient reducer.

1. The 6th worker of the 8-rank job: msrun numbers the workers RANK_ID 0..7, so the 6th has rank 5;
   get_group_size() is the size of the world group, 8.
2. Two servers x 4 cards: on server B msrun gets the job's total worker count, its own card count and its
   node index (A is 0): --worker_num=8 --local_worker_num=4 --node_rank=1.
3. The code cell with self.opt(grads) instead of self.opt(self.reduce_grads(grads)): no AllReduce, so each rank steps with the
   gradient of its own shard only, and the copies drift apart from the first step: the 8 ranks end with 8
   different sums of weights (615.26 .. 617.22 at ci, against 616.118225 on every rank with the reducer). False.
"""

RANK_AND_SIZE = (5, 8)
TWO_NODES_SERVER_B = {"worker_num": 8, "local_worker_num": 4, "node_rank": 1}
WITHOUT_REDUCER_SAME_SUMS = False
