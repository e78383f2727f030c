"""Documents' fields: their types, their in-memory index, the filter language, facets and the query planner.

A document may carry `fields`, a flat JSON object of keyword, keyword list, integer, float, boolean and date
values (`schema`). The store keeps them in the document's row, written in the same transaction, and the field
types of the collection beside them (service.store). Every state of a collection indexes them by row
(`index.FieldIndex`: a roaring bitmap per keyword value, sorted arrays for numbers and dates), so a filter
(`filters`) is a few bitmap operations, never a scan of the documents; `facets` counts values over the matching
set and `plan` picks, per query, an exact scan of the matching rows or the vector index with the set as a FAISS
selector (service.model_state)."""
