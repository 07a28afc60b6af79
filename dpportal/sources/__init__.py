"""Tables that stay where they live (Parquet files or folders, object storage, PostgreSQL):
what a source may reach, its sealed credentials and its registration page."""
