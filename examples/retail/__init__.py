"""The retail demo: a dirty retail feed generated into the local lakehouse and run through every
layer (``medallion demo``); its tables are configured in ``conf/``."""
