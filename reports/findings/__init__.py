"""The answer first: sentences with their numbers, ranked by the time at stake."""
