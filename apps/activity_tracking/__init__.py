"""Website activity tracking."""
