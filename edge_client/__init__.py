"""The gateway side: signal pipeline, labelled window store, federated participant, on-device inference.

Runs on a Raspberry Pi with the edge dependencies only (numpy, paho-mqtt, cbor2, pyserial); the runtime
path imports no scipy (a test checks it): scipy.signal alone costs ~100 MB of RSS.
"""
