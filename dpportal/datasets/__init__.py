"""Datasets: upload, the public schema (proposals, checks, the person question, DP estimates
of bounds and categories), the budget and its sharing, deletion."""
