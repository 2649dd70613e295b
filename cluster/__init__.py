"""The run on Ray: the driver (driver.py), the actor graph and its placement (graph.py), the group producer, the policy versions and the stages (search, train, selftrain)."""
