"""The bundled applications, each written against the public SDK only."""
