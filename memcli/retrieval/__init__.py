"""Retrieval shared by `query` and `acb build`: legs, fusion, then ranking stages."""
