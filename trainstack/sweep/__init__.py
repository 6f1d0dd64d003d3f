"""A sweep as a whole: every point checked before the first runs (points), and waiting on a waited sweep (wait).
May import: reports/, launch/ and below.
"""
