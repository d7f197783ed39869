"""What every service shares: settings, logging, errors, the gRPC server factory,
the Postgres pool and migrations. Nothing domain-specific lives here."""
