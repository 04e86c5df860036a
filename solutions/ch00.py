"""Chapter 00 exercises: ranks and msrun flags.

1. The 6th worker of the 8-rank job: msrun numbers the workers RANK_ID 0..7, so the 6th has rank 5;
   get_group_size() is the size of the world group, 8.
2. Two servers x 4 cards: on server B msrun gets the job's total worker count, its own card count and its
   node index (A is 0): --worker_num=8 --local_worker_num=4 --node_rank=1.
"""

RANK_AND_SIZE = (5, 8)
TWO_NODES_SERVER_B = {"worker_num": 8, "local_worker_num": 4, "node_rank": 1}
