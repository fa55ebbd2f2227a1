"""Reports: the journal's facts rendered as result.json and report.md. Pure."""
