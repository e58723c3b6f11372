"""Who a connection is: listeners and their security protocols, TLS, SASL and credentials."""
