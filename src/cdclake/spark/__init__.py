"""The Spark decode job."""
