"""Results: the typed summary.json (one writer, one reader), the figures list, SLO checks, compare, report.html."""
