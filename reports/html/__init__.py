"""The self-contained HTML report: its figures, tables and scope trees."""
