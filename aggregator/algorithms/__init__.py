"""Server halves of the training algorithms (FedSCS-XGB, FedForest, ...): pure maths on merged
client statistics; the protocol and transport live elsewhere."""
