"""`precis`: the command line of a Precis service (any URL, any key)."""
