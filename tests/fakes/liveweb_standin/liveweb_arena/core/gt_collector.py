"""Stand-in for liveweb_arena.core.gt_collector's module-level current collector."""
_current = None


def get_current_gt_collector():
    return _current


def set_current_gt_collector(collector):
    global _current
    _current = collector
