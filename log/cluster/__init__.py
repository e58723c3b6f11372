"""The cluster: the controller quorum's consensus (:mod:`.raft`), and in time the brokers'
registration, replication and the ISR."""
