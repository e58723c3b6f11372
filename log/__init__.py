"""The log system: storage, wire protocol, broker, groups and cluster."""
