"""What a user reads about runs: the dry run's full view (display), `trainstack status` and its table
(status, status_view), compare, diff, and W&B sync. May import: launch/ (the launcher interface, which
fills what only a launcher knows), preflight/, run/ and everything below; never sweep/, cli/ or a feature.
"""
