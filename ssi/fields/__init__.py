"""Documents' fields and the filter language, beneath the service and the offline tools.

A document may carry `fields`, a flat JSON object of keyword, keyword list, integer, float, boolean and date values
(`schema`, `types`); `index.FieldIndex` indexes them by row (roaring bitmaps per keyword value, sorted arrays for
numbers and dates) and `filters` parses a filter against a collection's types and evaluates it to the matching rows.
The service (service.fields: its store, facets, planner and per-key visibility), `ssi.load` and `ssi rank`/`ssi eval`
all filter with this one definition, so a filtered search means the same everywhere. Errors are plain `FieldError`s
(`errors`); the service answers them as 422 and 409 (service.fields.checks).
"""
