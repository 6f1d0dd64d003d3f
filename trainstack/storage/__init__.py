"""What a run leaves on disk, named and written safely: the run dir's file names (layout), atomic writes and
locks (files), what a complete checkpoint is (checkpoints), storage faults, hf_xet's memory bounds, and where
trainstack keeps its own caches for this user (user_cache). May import: the top-level basics only.
"""
