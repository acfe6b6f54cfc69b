"""The Spark decode job. Importing it in a Python worker (a task's code does) keeps the zip
archives on the worker's path read once (:mod:`cdclake.spark.zipimports`)."""

from cdclake.spark.zipimports import keep_zip_directories

keep_zip_directories()
