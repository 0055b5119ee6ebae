"""The transaction coordinator (KIP-98, KIP-360, KIP-890 TV2; KIP-939 later)."""
