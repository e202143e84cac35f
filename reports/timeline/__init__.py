"""The timeline layer every topic builds on: intervals (busy, idle, overlap, coverage), steps' rows and
windows, collectives matched across ranks on one clock, and who waits on whom. Imports no topic."""
