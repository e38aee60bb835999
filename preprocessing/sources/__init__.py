"""Input formats: each module streams one kind of corpus file into records."""
