"""``platform console``: a read-only web view of the cluster, its groups and projections."""
