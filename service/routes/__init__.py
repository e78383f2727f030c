"""One router per resource: search, documents, model, words, admin, health, metrics, pages."""
