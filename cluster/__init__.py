"""Driver that builds the actor graph from config, placement and job-submission recipes: issues 3-4."""
