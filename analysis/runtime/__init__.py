"""Running models here: fla's ops routed by device (pure-torch CPU ops, one Recurrence per kind of state update, a
guard for unrouted Triton launches), freed memory handed back to the system, Ctrl-C, cancel."""
