"""The host before a job: machine, GPU and Ascend checks, the libraries MindSpore's plugins will load, and the report."""
