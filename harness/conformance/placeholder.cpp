// Removed once the scenarios land.
