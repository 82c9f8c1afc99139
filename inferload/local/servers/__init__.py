"""Start, check and stop the local Triton and TorchServe on loopback (`inferload servers up|down|status`)."""
