"""The tuning loop of the seeds' method: sweeps over load, and capacity under an SLO (`inferload sweep`)."""
