"""Who may do what: roles and the permission check, the users file, the audit log."""
