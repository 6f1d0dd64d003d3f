"""One writer per run: the lease file (lease), the epoch a writer proves at each write (fence), and the wrapper
around Megatron's tracker write (tracker_fence). May import: the top-level basics, storage/.
"""
