"""Everything the dry run and the launch check and derive before anything is written: the host's checks
(host_checks), the plugins' verdict asked of the trainer's interpreter (plugin_probe), the preflight that runs
them for both alike (checks), and what the dry run derives and says first (dry_summary, dry_head). May import:
run/ and the floors below it (render/, rules/, metrics/, config/, upstream/, fencing/, storage/, terminal/),
the top-level basics and the launcher registry; never launch/, reports/, sweep/, cli/ or a feature.
"""
