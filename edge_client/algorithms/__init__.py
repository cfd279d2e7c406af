"""Client halves of the training algorithms: what a gateway computes from its own data when the
aggregator asks. Each is named after its algorithm, like its messages and its server half."""
