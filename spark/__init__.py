"""spark: a PySpark data source for Longboat topics. Talks to the cluster only as a client."""
