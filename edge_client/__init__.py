"""The gateway side: signal pipeline, labelled window store, federated participant, on-device inference.

Runs on a Raspberry Pi with the edge dependencies only (numpy, scipy, paho-mqtt, cbor2, pyserial).
"""
