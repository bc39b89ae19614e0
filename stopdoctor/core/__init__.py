"""Plain data every stage shares: findings, severities, the one Report, errors and exit codes, locations. Imports nothing else of the package."""
