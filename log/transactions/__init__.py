"""Transactions (KIP-98): the transaction coordinator and its log."""
