"""Reading traces: format detection, parsing in parallel, the caches, the Session every command opens its inputs through, run folders' files."""
