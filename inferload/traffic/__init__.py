"""Traffic: closed-loop user-count timelines, open-loop arrival times (pure), and the arrival scheduler."""
