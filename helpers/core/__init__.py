"""What every other package builds on: the job config and its presets, errors, paths, the metrics format, the ResNet layout and the memory planner.

Pure Python and numpy, no MindSpore and no processes; imports nothing from the other helpers packages.
"""
