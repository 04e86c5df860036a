"""The course's tested library: every notebook calls into these modules (one concern each).

MindSpore logs at WARNING level by default, which floods notebooks with messages about absent GPU/Ascend
plugins; the course sets ``GLOG_v=3`` (errors only) unless the user chose a level.
"""

import os

os.environ.setdefault("GLOG_v", "3")
