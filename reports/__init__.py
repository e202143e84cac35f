"""Reports: pure analyses (DataFrame -> DataFrame) and renderers (text, csv/json, HTML)."""
