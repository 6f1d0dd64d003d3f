"""A run on any machine: its directory (rundir/), its stored spec (spec), the launcher binding of a run id
(binding), the resume plan (resume), what it ever published (published_history), the lifecycle that executes
it, its result (result), why a trainer failed (failure_cause), and the guard that is the trainer's first
process (trainer_guard). May import: render/, rules/, config/, metrics/ and below.
"""
