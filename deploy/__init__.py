"""What a deployed stack is upgraded from: the released table definition, and the check of an upgrade against it."""
