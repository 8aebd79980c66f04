"""Weight stores: framework bindings of the weight-store seam (import each from its module, so that
only the framework you use is imported)."""
