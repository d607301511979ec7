"""Stand-in for the parts of gym the reference imports (gym itself no longer installs)."""
