"""Privacy and tenancy: categories, tenants, secrets and redaction, encryption, file modes."""
