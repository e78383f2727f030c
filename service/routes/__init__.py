"""One router per resource: search, documents, model, admin, health, metrics, pages."""
